#!/usr/bin/env bash
# H200, session 23 (issue 11): depthwise window kernels whose warps read fewer, fuller cache lines (B1 found
# the 7x7 kernel neither L2- nor issue-bound: all 7 tap rows in one CTA ran 0.77x). Same loop, same SASS, more
# channels per CTA: a warp load then covers 2-4 pixels of 64-128 bytes instead of 8-16 pixels of 32-64
# bytes. 3x3 (fresh sets random_dw3_2026120425, random_dw3_2026120426), 5x5 and 7x7 (B1's sets) and the corpus.
# gpu_dw_configs_ab.py: every launch verified three times against float64, dW and workspace poisoned.
# Build (CPU): compile-all --corpus each set into a copy of b1cache; build_dw_configs.py with the --config
#   list below; skwgrad cache export. Carried: .whl, .device/b2.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/b2.tar.xz
S=benchmarks/shapes
timeout 540 python3 benchmarks/gpu_dw_configs_ab.py --cache /tmp/pc --corpus $S/random_dw3_2026120425.csv --corpus $S/random_dw3_2026120426.csv \
  --corpus $S/random_dw7_2026120424.csv --corpus $S/random_dw5_2026120423.csv --corpus tests/data/wgrad_shapes.csv \
  --config 7:win7:64x16x4 --config 7:win7:64x32x8 --config 7:win7r2:64x16x4 --config 7:win7:128x8x4 \
  --config 5:win7r5:32x8x4 --config 5:win7r5:64x4x4 --config 3:win7r3:32x32x4 --config 3:win7r3:64x16x4 --config 3:win7r3:64x32x8 \
  --commit "${X_COMMIT:-}" --budget-s 480 --out $OUT/dw_configs_b2.json 2>&1 | cut -c1-400 | tail -80
echo "ab rc=$? $(( $(date +%s) - t0 )) s"
