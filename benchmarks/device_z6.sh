#!/usr/bin/env bash
# H200, session 21 (issues 12, 11): wgrad_tma at 128 rows a step (bk 128, half the ring slots) against
# the same kernels at 64 (the default), each launch beside its twin at the same split and pool; auto
# with and without the twins. Rows: the corpus, random_g_2026120499, random_2026120500, random_3d_2026120402.
# Build (CPU): Z4's B cache (.device/z4cache, 57b544a) + python benchmarks/build_tma_bk_twins.py --cache .device/z4cache;
#   skwgrad cache export --cache .device/z4cache .device/z6.tar.xz. Carried: .whl, .device/z6.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/z6.tar.xz
timeout 420 python3 benchmarks/gpu_tma_bk_ab.py --cache /tmp/pc --commit "${X_COMMIT:-}" --budget-s 360 --top 3 \
  --corpus tests/data/wgrad_shapes.csv --corpus benchmarks/shapes/random_g_2026120499.csv \
  --corpus benchmarks/shapes/random_2026120500.csv --corpus benchmarks/shapes/random_3d_2026120402.csv \
  --out $OUT/tma_bk_ab_z6.json 2>&1 | cut -c1-150 | tail -12
echo "ab rc=$? $(( $(date +%s) - t0 )) s"
