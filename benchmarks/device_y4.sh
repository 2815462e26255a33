#!/usr/bin/env bash
# H200, session 20 (issues 12, 11, 10): Y3 again on a cache of the default preset only. Y3's cache
# also held the GPU suite's test kernels (3-slot and stream-K TMA kernels the default does not build)
# and their twins, and auto or before took one of them on 20 of its 54 rows. Here: auto against
# `before` (the two-CTA kernels left out, their one-CTA builds in the cache), cuDNN beside, every
# launch verified 3x (gpu_tma_regs_ab.py --before-only).
# Rows: random_g_2026120498 (16 grouped, drawn before this run), random_g_2026120497, random_2026120496,
# then the corpus (tests/data/wgrad_shapes.csv) while the budget lasts.
# Build (CPU): skwgrad compile-all --preset default --arch sm_90 --corpus <each csv> --cache .device/y4cache;
#   python benchmarks/build_tma_regs_twins.py --cache .device/y4cache; skwgrad cache export --cache .device/y4cache
#   .device/y4.tar.xz. Carried: .whl, .device/y4.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/y4.tar.xz
timeout 420 python3 benchmarks/gpu_tma_regs_ab.py --cache /tmp/pc --commit "${X_COMMIT:-}" --budget-s 360 --before-only \
  --corpus benchmarks/shapes/random_g_2026120498.csv --corpus benchmarks/shapes/random_g_2026120497.csv \
  --corpus benchmarks/shapes/random_2026120496.csv --corpus tests/data/wgrad_shapes.csv \
  --out $OUT/tma_regs_default_y4.json 2>&1 | cut -c1-200 | tail -75
echo "ab rc=$? $(( $(date +%s) - t0 )) s"
