#!/usr/bin/env bash
# H200, session 20 (issue 11): grouped wgrad with one MMA per group. (1) the product family
# grouped_taps: auto against auto without the family (`before`), cuDNN, and the family's other split
# degrees (gpu_grouped_taps_ab.py, every launch verified 3x against float64); (2) the prototype's
# three loops (benchmarks/grouped_bdot_proto.py, Triton JIT on the device) and their BK / warps.
# Rows: the five weakest grouped rows of X9 (grouped_low_x9) and random_g_2026120494 (16 grouped
# layers drawn before any timing of this session).
# gpu_grouped_taps_ab.py and the family were reverted after this run (the commit after 5d4e62e): run it at 5d4e62e.
# Build (CPU): skwgrad compile-all --preset default --arch sm_90 --corpus <both csv> --cache .device/gcache2;
#   skwgrad cache export --cache .device/gcache2 .device/y1.tar.xz. Carried: .whl, .device/y1.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/y1.tar.xz
c1=benchmarks/shapes/grouped_low_x9.csv; c2=benchmarks/shapes/random_g_2026120494.csv
timeout 300 python3 benchmarks/gpu_grouped_taps_ab.py --cache /tmp/pc --corpus $c1 --corpus $c2 --commit "${X_COMMIT:-}" \
  --budget-s 240 --out $OUT/grouped_taps_ab.json 2>&1 | cut -c1-260 | tail -24
echo "ab rc=$? $(( $(date +%s) - t0 )) s"
timeout 200 python3 benchmarks/grouped_bdot_proto.py run --commit "${X_COMMIT:-}" --budget-s 160 \
  --corpus $c1 $c2 --reps 20 --out $OUT/bdot_y1.json 2>&1 | cut -c1-250 | tail -24
echo "proto rc=$? $(( $(date +%s) - t0 )) s"
