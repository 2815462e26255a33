#!/usr/bin/env bash
# H200, session 24: the dense and grouped 16-bit layers of four torchvision models (the problems C1 recorded,
# benchmarks/shapes/model_*_2026-12-04.csv, committed before this run) through gpu_tma_auto.py: auto's launch,
# the model's 6 best TMA launches and the 3 best of the other families, each verified, against cuDNN. What
# real models' layers say about selection (issue 10) and the main loop (issue 12); dW is fp32 (autocast).
# Carried: .whl, .device/d.tar.xz (C1's cache).
set -uo pipefail
source benchmarks/device_setup.sh .device/d.tar.xz
S=benchmarks/shapes; mkdir -p /tmp/o
timeout 520 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --top 6 --top-old 3 --no-end-to-end \
  --corpus $S/model_resnet50_2026-12-04.csv --corpus $S/model_mobilenet_v2_2026-12-04.csv \
  --corpus $S/model_convnext_tiny_2026-12-04.csv --corpus $S/model_efficientnet_b0_2026-12-04.csv \
  --out /tmp/o/tma_auto_models_c3.json > /tmp/o/tma_auto_models_c3.log 2>&1
echo "tma_auto rc=$? $(( $(date +%s) - t0 )) s"; tail -1 /tmp/o/tma_auto_models_c3.log | cut -c1-1500
tar -C /tmp/o -cJf $OUT/c3.tar.xz .
