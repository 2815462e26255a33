#!/usr/bin/env bash
# H200, session 20 (issue 12): three CTAs an SM for the 64x64 TMA tile (max_regs 80: 256 threads x
# 80 registers, the MMA warps at 136 through setmaxnreg; 66 KB of shared memory x 3) against the
# shipped two-CTA build (max_regs 128). gpu_tma_regs_ab.py --base-regs 128 --twin-regs 80: the
# model's top 3 launches of two-CTA 64x64 kernels, each twin at the same split and at 1.5x the CTAs.
# Rows: random_g_2026120498, random_g_2026120497, random_2026120496, the corpus.
# Build (CPU): skwgrad compile-all --preset default --arch sm_90 --corpus <each csv> --cache .device/y5cache (spec.py
#   changed, so Y4's cache is stale); python benchmarks/build_tma_regs_twins.py --cache .device/y5cache --three;
#   skwgrad cache export --cache .device/y5cache .device/y5.tar.xz. Carried: .whl, .device/y5.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/y5.tar.xz
timeout 330 python3 benchmarks/gpu_tma_regs_ab.py --cache /tmp/pc --commit "${X_COMMIT:-}" --budget-s 270 --base-regs 128 \
  --twin-regs 80 --corpus benchmarks/shapes/random_g_2026120498.csv --corpus benchmarks/shapes/random_g_2026120497.csv \
  --corpus benchmarks/shapes/random_2026120496.csv --corpus tests/data/wgrad_shapes.csv \
  --out $OUT/tma_regs3_y5.json 2>&1 | cut -c1-220 | tail -40
echo "ab rc=$? $(( $(date +%s) - t0 )) s"
