#!/usr/bin/env bash
# H200, session 22 (issue 10): the 3-D TMA price lowered (main_iter_tma_3d 0.125 -> 0.02, with model 12's
# partial-box term) against auto_prev (0.125), on random_3d_2026120419 (drawn and committed before this run)
# and the corpus (its two 3-D rows; the 2-D rows do not change). gpu_tma_auto.py: auto, auto_prev, the
# model's 6 best TMA and 3 best other launches, cuDNN; every launch verified; the user's call end to end.
# Build (CPU): cp -r .device/a4cache .device/a8cache; skwgrad compile-all --preset default --arch sm_90
#   --corpus benchmarks/shapes/random_3d_2026120419.csv --cache .device/a8cache; skwgrad cache export.
#   Carried: .whl, .device/a8.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/a8.tar.xz
timeout 400 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --top 6 --top-old 3 --prev-constant main_iter_tma_3d=0.125 \
  --corpus benchmarks/shapes/random_3d_2026120419.csv --corpus tests/data/wgrad_shapes.csv --out $OUT/tma_auto_a8.json > $OUT/tma_auto_a8.log 2>&1
echo "tma_auto rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $OUT/tma_auto_a8.log | cut -c1-1200
