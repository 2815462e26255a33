#!/usr/bin/env bash
# H200, session 20 (issues 12 and 11): wgrad_tma launches at one CTA an SM against their two-CTA
# twins (max_regs 128: 256 threads x 128 registers, the MMA warps still at 232 through setmaxnreg).
# Runs X9 and Y1 found the 64x64 TMA loop at one CTA an SM ~0.26 us an iteration whatever its N
# (64 or 128): latency, not throughput. gpu_tma_regs_ab.py: auto, the model's top 3 twin-able TMA
# launches, each twin at the same split and at twice the CTAs; every launch verified 3x.
# Rows: grouped_low_x9, random_g_2026120494, random_2026120495 (20 dense layers drawn this session
# before any run of this experiment).
# Build (CPU): skwgrad compile-all --preset default --arch sm_90 --corpus <the three csv> --cache .device/y2cache;
#   python benchmarks/build_tma_regs_twins.py --cache .device/y2cache; skwgrad cache export --cache .device/y2cache
#   .device/y2.tar.xz. Carried: .whl, .device/y2.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/y2.tar.xz
timeout 520 python3 benchmarks/gpu_tma_regs_ab.py --cache /tmp/pc --commit "${X_COMMIT:-}" --budget-s 450 \
  --corpus benchmarks/shapes/grouped_low_x9.csv --corpus benchmarks/shapes/random_g_2026120494.csv \
  --corpus benchmarks/shapes/random_2026120495.csv --out $OUT/tma_regs_ab_y2.json 2>&1 | cut -c1-300 | tail -45
echo "ab rc=$? $(( $(date +%s) - t0 )) s"
