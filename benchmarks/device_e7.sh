#!/usr/bin/env bash
# H200, session 26: E6's host-included numbers moved with the machine (PyTorch's own call 27.7 -> 41.2 us median):
# what the dependent launch costs on the host, in one process (gpu_dependent_host.py), on the models' depthwise
# layers and ResNet-50's. Carried: .whl, .device/e3.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/e3.tar.xz
S=benchmarks/shapes; mkdir -p /tmp/o
timeout 200 python3 benchmarks/gpu_dependent_host.py --cache /tmp/pc --corpus $S/dw_models_2026-12-04.csv --corpus $S/model_resnet50_2026-12-04.csv \
  --commit "${X_COMMIT:-}" --out /tmp/o/dependent_host.json > /tmp/o/dependent_host.log 2>&1
echo "host rc=$? $(( $(date +%s) - t0 )) s"; tail -1 /tmp/o/dependent_host.log | cut -c1-400
tar -C /tmp/o -cJf $OUT/e7.tar.xz .
