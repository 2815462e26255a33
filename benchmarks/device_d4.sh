#!/usr/bin/env bash
# H200, session 25:
# 1. issue 10: cost model 13 (a credit per load of the pointwise Triton loops, a price per split adding into
#    each dW element; fitted on the CPU from runs V5-A9 and C3) against model 12 in one pass (gpu_tma_auto.py:
#    auto = model 13, auto_prev = model 12's constants via --prev-constant), with the model's best launches
#    timed beside, on random_2026120471 (28 layers) and pw_random_2026120472 (16 1x1 layers), both drawn after
#    the fit and before this run;
# 2. issue 11: every depthwise candidate at the search's split degrees with the new window epilogue
#    (`skwgrad calibrate --dry-run`) on dw_random_2026120463, dw_random_2026120461 and dw_random_2026120464
#    (drawn before this run), for the window split rule's two costs.
# Carried: .whl, .device/d3.tar.xz (the default sm_90 cache of b330904; the cost model is not in its keys).
set -uo pipefail
source benchmarks/device_setup.sh .device/d3.tar.xz
S=benchmarks/shapes; mkdir -p /tmp/o
PREV="$(cat benchmarks/prev_model12.args)"
timeout 330 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --top 6 --top-old 3 --no-end-to-end $PREV \
  --corpus $S/random_2026120471.csv --corpus $S/pw_random_2026120472.csv --out /tmp/o/tma_auto_m13.json > /tmp/o/tma_auto_m13.log 2>&1
echo "tma_auto rc=$? $(( $(date +%s) - t0 )) s"; tail -1 /tmp/o/tma_auto_m13.log | cut -c1-1500
for s in dw_random_2026120463 dw_random_2026120461 dw_random_2026120464; do
  timeout 100 python3 -m skwgrad calibrate --cache /tmp/pc --corpus $S/$s.csv --dry-run --out /tmp/o/select_all_$s.json > /tmp/o/cal_$s.log 2>&1
  echo "calibrate $s rc=$? $(( $(date +%s) - t0 )) s"; tail -2 /tmp/o/cal_$s.log | cut -c1-300
done
tar -C /tmp/o -cJf $OUT/d4.tar.xz .
