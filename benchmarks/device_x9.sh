#!/usr/bin/env bash
# H200, session 19 (issues 10 and 11): every candidate of the five grouped rows of X8 that ran below
# 0.8x cuDNN (calibrate --dry-run: the whole search space timed, nothing stored), so a later fit sees
# where the model's pick (TMA direct at 108 CTAs for 768 ch in 48 groups: 65 us against cuDNN's 33)
# went wrong. Carried: .whl, .device/x8.tar.xz (device_x8.sh's build).
set -uo pipefail
source benchmarks/device_setup.sh .device/x8.tar.xz
timeout 240 python3 -m skwgrad calibrate --cache /tmp/pc --dry-run --corpus benchmarks/shapes/grouped_low_x9.csv \
  --out $OUT/all_grouped_low_x9.json 2> $OUT/all_grouped_low_x9.log | tail -3
echo "calibrate rc=$? $(( $(date +%s) - t0 )) s"
