#!/usr/bin/env bash
# H200, session 20 (issue 11): grouped wgrad with one MMA per group (benchmarks/grouped_bdot_proto.py,
# Triton JIT on the device) against cuDNN and skwgrad's auto pick, on the five weakest grouped rows of
# X9 (grouped_low_x9) and random_g_2026120494 (16 grouped layers drawn before any prototype timing).
# Build (CPU): skwgrad compile-all --preset default --arch sm_90 --corpus <both csv> --cache .device/gcache;
#   skwgrad cache export --cache .device/gcache .device/y1.tar.xz. Carried: .whl, .device/y1.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/y1.tar.xz
timeout 500 python3 benchmarks/grouped_bdot_proto.py run --cache /tmp/pc --commit "${X_COMMIT:-}" --budget-s 440 \
  --corpus benchmarks/shapes/grouped_low_x9.csv benchmarks/shapes/random_g_2026120494.csv --reps 20 \
  --out $OUT/bdot_y1.json 2>&1 | cut -c1-250 | tail -40
echo "bdot rc=$? $(( $(date +%s) - t0 )) s"
