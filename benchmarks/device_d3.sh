#!/usr/bin/env bash
# H200, session 25, after b330904 (the depthwise window epilogue without a shuffle tree; the TMA depthwise
# family for 3x3 only):
# 1. the GPU launcher suite on the new kernels (numerics with poisoned buffers, layouts, graphs);
# 2. the window kernels' channel blocks and split degrees with the new epilogue (gpu_dw_configs_ab.py: each
#    default window configuration at the split rule's degree, twice it and half it, beside auto and cuDNN)
#    on dw_random_2026120463 (20 depthwise layers drawn for this run) and dw_random_2026120461 (D1's set,
#    where the 32-channel 3x3 kernel lost at 55-56 px).
# Carried: .whl, .device/d3.tar.xz (the default sm_90 cache of b330904), .device/suite2.tar.xz (the suite's kernels).
set -uo pipefail
source benchmarks/device_setup.sh .device/d3.tar.xz
rm -rf /tmp/ps; python3 -m skwgrad cache import .device/suite2.tar.xz --cache /tmp/ps | tail -1
S=benchmarks/shapes; mkdir -p /tmp/o
SKWGRAD_CACHE=/tmp/ps timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_launcher.py -p no:cacheprovider > /tmp/o/gpu_dw.log 2>&1
echo "gpu suite rc=$? $(( $(date +%s) - t0 )) s"; tail -4 /tmp/o/gpu_dw.log | cut -c1-300
CFG="--config 3:win7r3:32x32x4 --config 3:win7r3:16x64x4 --config 5:win7r5:16x16x4 --config 7:win7:32x32x4 --config 7:win7:16x64x4"
CFG="$CFG --config 3:win7r3s2:16x32x4 --config 5:win7s2:32x16x4 --config 7:win7s2:32x16x4 --config 3:win5r3:16x64x4"
timeout 330 python3 benchmarks/gpu_dw_configs_ab.py --cache /tmp/pc --corpus $S/dw_random_2026120463.csv --corpus $S/dw_random_2026120461.csv \
  $CFG --commit "${X_COMMIT:-}" --budget-s 300 --out /tmp/o/dw_configs.json > /tmp/o/dw_configs.log 2>&1
echo "configs rc=$? $(( $(date +%s) - t0 )) s"; tail -40 /tmp/o/dw_configs.log | cut -c1-260
tar -C /tmp/o -cJf $OUT/d3.tar.xz .
