#!/usr/bin/env bash
# H200, session 25, on sets drawn after the changes they judge:
# 1. issue 11: the window split rule's refitted costs (500, 0.25; 95d642c) against the previous (2000, 2), same
#    process (gpu_dw_split_ab.py), on dw_random_2026120465 (20 depthwise layers);
# 2. issue 10: cost model 13 against model 12's constants (gpu_tma_auto.py, as D4) on random_2026120473 (30 layers).
# Carried: .whl, .device/d3.tar.xz (the default sm_90 cache of b330904; neither change is in its keys).
set -uo pipefail
source benchmarks/device_setup.sh .device/d3.tar.xz
S=benchmarks/shapes; mkdir -p /tmp/o
timeout 200 python3 benchmarks/gpu_dw_split_ab.py --cache /tmp/pc --corpus $S/dw_random_2026120465.csv --prev-costs 2000,2 \
  --commit "${X_COMMIT:-}" --budget-s 170 --out /tmp/o/dw_split_ab.json > /tmp/o/dw_split_ab.log 2>&1
echo "dw split rc=$? $(( $(date +%s) - t0 )) s"; tail -22 /tmp/o/dw_split_ab.log | cut -c1-220
PREV="$(cat benchmarks/prev_model12.args)"
timeout 220 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --top 6 --top-old 3 --no-end-to-end $PREV \
  --corpus $S/random_2026120473.csv --out /tmp/o/tma_auto_m13_73.json > /tmp/o/tma_auto_m13_73.log 2>&1
echo "tma_auto rc=$? $(( $(date +%s) - t0 )) s"; tail -1 /tmp/o/tma_auto_m13_73.log | cut -c1-1200
tar -C /tmp/o -cJf $OUT/d5.tar.xz .
