#!/usr/bin/env bash
# H200, session 21 (issues 12, 10): cost model 11's 3-D TMA price refitted on the loop without divisions
# (0.057 us, 3341e7d) against the price before (0.125), on random_3d_2026120406 (drawn and committed
# before this run): auto, auto_prev (auto at 0.125), before (no 3-D TMA kernels), the model's best TMA
# and other launches, cuDNN; every launch verified; the user's call end to end.
# Build (CPU): skwgrad compile-all --preset default --arch sm_90 --corpus benchmarks/shapes/random_3d_2026120406.csv
#   --cache .device/z9cache; skwgrad cache export --cache .device/z9cache .device/z9.tar.xz. Carried: .whl, .device/z9.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/z9.tar.xz
timeout 400 python3 benchmarks/gpu_tma_3d_ab.py --cache /tmp/pc --commit "${X_COMMIT:-}" --budget-s 330 --end-to-end --prev-3d-price 0.125 \
  --corpus benchmarks/shapes/random_3d_2026120406.csv --out $OUT/tma_3d_z9.json 2>&1 | cut -c1-160 | tail -16
echo "ab rc=$? $(( $(date +%s) - t0 )) s"
