#!/usr/bin/env bash
# H200, session 11 run P5, on the sm_90 default of this commit (f2.tar.xz: the kernels of the default, 475 for sm_90, that selection can choose for these sets: the 2-group
# packed tile for 32 channels per group, the dilation-2 window kernel): random_g_2026120232 (drawn
# after the change, before this run): auto verified against float64 with cuDNN beside, every
# candidate timed, auto and the sweep's leaders re-timed in one pass; auto again on
# random_dw_2026120231 (its dilation-2 row ran the gather kernel in P3). Carried: .whl, .device/f2.tar.xz.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
R=/tmp/p5; mkdir -p $R; t0=$(date +%s); S=benchmarks/shapes
python3 -m skwgrad cache import .device/f2.tar.xz --cache /tmp/fc | tail -1
n=random_g32; csv=$S/random_g_2026120232.csv
timeout 120 python3 -m skwgrad run-from-cache --cache /tmp/fc --corpus $csv --verify --bench --baseline cudnn --iters 30 --out $R/auto_$n.json > $R/auto_$n.log 2>&1
echo "auto $n rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $R/auto_$n.log
timeout 150 python3 -m skwgrad calibrate --cache /tmp/fc --dry-run --corpus $csv --out $R/all_$n.json 2> $R/all_$n.log | tail -1
echo "all $n rc=$? $(( $(date +%s) - t0 )) s"
timeout 100 python3 benchmarks/duel_auto_tuned.py --cache /tmp/fc --all $R/all_$n.json --budget-s 70 --out $R/duel_$n.json > $R/duel_$n.log 2>&1
echo "duel $n rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $R/duel_$n.log
timeout 90 python3 -m skwgrad run-from-cache --cache /tmp/fc --corpus $S/random_dw_2026120231.csv --verify --bench --baseline cudnn --iters 30 --out $R/auto_random_dw31.json > $R/auto_random_dw31.log 2>&1
echo "auto dw31 rc=$? $(( $(date +%s) - t0 )) s"; grep -E "randdw_06" $R/auto_random_dw31.log | head -2
tar -C $R -cJf $OUT/p5.tar.xz .
