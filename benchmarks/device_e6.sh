#!/usr/bin/env bash
# H200, session 26: D7 again after the dependent atomic launches (225e0d8; cuLaunchKernelEx on the hot path), host included:
# gpu_dwconv_tma_ab.py --end-to-end on the models' 23 depthwise layers (dw_models_2026-12-04): per row auto's
# device time, cuDNN's, and wall time per call of skwgrad.wgrad (the API), the skwgrad::conv_weight_grad op and
# PyTorch's own weight gradient (gpu_tma_auto.end_to_end), back-to-back calls synchronized at the end.
# Carried: .whl, .device/e3.tar.xz (the default sm_90 cache of 225e0d8).
set -uo pipefail
source benchmarks/device_setup.sh .device/e3.tar.xz
mkdir -p /tmp/o
timeout 220 python3 benchmarks/gpu_dwconv_tma_ab.py --cache /tmp/pc --corpus benchmarks/shapes/dw_models_2026-12-04.csv --end-to-end \
  --commit "${X_COMMIT:-}" --budget-s 190 --out /tmp/o/dw_models_e2e.json > /tmp/o/dw_models_e2e.log 2>&1
echo "e2e rc=$? $(( $(date +%s) - t0 )) s"; tail -3 /tmp/o/dw_models_e2e.log | cut -c1-600
tar -C /tmp/o -cJf $OUT/e6.tar.xz .
