#!/usr/bin/env bash
# H200, session 19: X10's end-to-end check again after the plan keeps tensor-map bytes per address,
# on four of its small rows (10-13 us on the device). Carried: .whl, .device/x7.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/x7.tar.xz
timeout 100 python3 benchmarks/gpu_dwconv_tma_ab.py --cache /tmp/pc --corpus benchmarks/shapes/dw_wide_x11.csv \
  --commit "${X_COMMIT:-}" --budget-s 60 --end-to-end --out $OUT/dwconv_tma_e2e_x11.json 2>&1 | cut -c1-330 | tail -2
