#!/usr/bin/env bash
# H200, session 27: cost model 14 (main_iter_tma_three_ctas, a price per CTA-iteration of the busiest CU of a
# TMA launch with three CTAs an SM) judged in one process: gpu_tma_auto.py with auto_prev = model 13 (the term at 0,
# --prev-constant), on the 9 rows whose pick it changes offline (tma_three_ctas_flip_2026-12-04: 4 of four sets drawn
# for this run, random_2026120604, pw_random_2026120605, pw_hires_2026120606, random_fewch_2026120607, which changed on
# no other row; 3 corpus rows; 2 of the models' 1x1 layers, the last five in the fit), every launch verified.
# Carried: .whl, .device/f0.tar.xz (the default sm_90 cache of e263171's source; costmodel.py is not a key file).
set -uo pipefail
source benchmarks/device_setup.sh .device/f0.tar.xz
S=benchmarks/shapes; mkdir -p /tmp/o
timeout 300 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --top 2 --top-old 2 --no-end-to-end --rounds 5 \
  --prev-constant main_iter_tma_three_ctas=0 --corpus $S/tma_three_ctas_flip_2026-12-04.csv --out /tmp/o/three_ctas.json > /tmp/o/three_ctas.log 2>&1
echo "three_ctas rc=$? $(( $(date +%s) - t0 )) s"; cat /tmp/o/three_ctas.log | cut -c1-260 | tail -12
tar -C /tmp/o -cJf $OUT/f4.tar.xz .
