#!/usr/bin/env bash
# H200, session 23 (issue 11): depthwise window configurations that hold more tap rows per CTA (7x7: 2, 4 or
# all 7 tap rows instead of 1, so x and dy cross L2 fewer times; 5x5: 4 channels a thread instead of 2, and
# strips of 5) against the shipped window kernel and auto, on random_dw5_2026120423 and random_dw7_2026120424
# (drawn before this run) and the corpus. gpu_dw_configs_ab.py: every launch verified three times against
# float64, dW and workspace poisoned; each configuration at its rule's split degree, twice it and half it.
# Build (CPU): skwgrad compile-all --preset default --arch sm_90 --corpus each set --cache .device/b1cache;
#   build_dw_configs.py with the same --config list; skwgrad cache export. Carried: .whl, .device/b1.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/b1.tar.xz
S=benchmarks/shapes
timeout 500 python3 benchmarks/gpu_dw_configs_ab.py --cache /tmp/pc --corpus $S/random_dw7_2026120424.csv --corpus $S/random_dw5_2026120423.csv \
  --corpus tests/data/wgrad_shapes.csv --config 7:win7r2:32x32x4 --config 7:win7r4:32x16x4:v4 --config 7:win7r7:64x8x8:v2 \
  --config 5:win7r5:32x16x4 --config 5:win5r5:32x16x4 --commit "${X_COMMIT:-}" --budget-s 440 --out $OUT/dw_configs_b1.json 2>&1 | cut -c1-330 | tail -60
echo "ab rc=$? $(( $(date +%s) - t0 )) s"
