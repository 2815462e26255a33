#!/usr/bin/env bash
# H200, session 20 (issues 12, 11, 10): the default with three 64x64 CTAs an SM (max_regs 80; the
# other small tiles at 128) against `before`, auto with the 80-register kernels left out (the
# 128-register 64x64 builds of the previous default in the cache), cuDNN beside, every launch
# verified 3x (gpu_tma_regs_ab.py --before-only --exclude-regs 80).
# Rows: random_g_2026120499 (14 grouped) and random_2026120500 (16 dense), drawn before this run.
# Build (CPU): Y5's cache (.device/y5cache: the previous default and its 80-register twins) plus
#   skwgrad compile-all --preset default --arch sm_90 --corpus <both csv>; build_tma_regs_twins.py --three;
#   skwgrad cache export --cache .device/y5cache .device/y6.tar.xz. Carried: .whl, .device/y6.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/y6.tar.xz
timeout 240 python3 benchmarks/gpu_tma_regs_ab.py --cache /tmp/pc --commit "${X_COMMIT:-}" --budget-s 200 --before-only \
  --exclude-regs 80 --corpus benchmarks/shapes/random_g_2026120499.csv --corpus benchmarks/shapes/random_2026120500.csv \
  --out $OUT/tma_regs3_default_y6.json 2>&1 | cut -c1-200 | tail -34
echo "ab rc=$? $(( $(date +%s) - t0 )) s"
