#!/usr/bin/env bash
# H200, session 15 run T4 (issues 11, 12, 10): the new default (grouped problems through the TMA
# family, the 64x256 4-tap TMA kernels at a 5-slot ring) on two sets drawn after T3 and before this
# run (random_2026120352 dense, random_g_2026120352 grouped), no fit or decision saw them:
#  - benchmarks/gpu_tma_auto.py: auto against auto without the TMA kernels and cuDNN, every timed
#    launch verified (16-bit rows);
#  - run-from-cache --verify --bench --baseline cudnn on both sets (all dtypes).
# Carried: .whl, .device/t4.tar.xz (a clean cache: `compile-all --preset default --corpus` both sets, so no stage twin sits beside a default kernel).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
t0=$(date +%s)
rm -rf /tmp/pc; python3 -m skwgrad cache import .device/t4.tar.xz --cache /tmp/pc | tail -1
timeout 200 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --no-end-to-end --corpus benchmarks/shapes/random_2026120352.csv \
  --corpus benchmarks/shapes/random_g_2026120352.csv --out $OUT/tma_auto_52.json > $OUT/tma_auto_52.log 2>&1
echo "tma_auto 52 rc=$? $(( $(date +%s) - t0 )) s"; cut -c1-200 $OUT/tma_auto_52.log
for set in d52:benchmarks/shapes/random_2026120352.csv g52:benchmarks/shapes/random_g_2026120352.csv; do
  timeout 90 python3 -m skwgrad run-from-cache --cache /tmp/pc --corpus ${set#*:} --verify --bench --baseline cudnn --iters 30 \
    --out $OUT/auto_${set%%:*}.json > $OUT/auto_${set%%:*}.log 2>&1
  echo "auto ${set%%:*} rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $OUT/auto_${set%%:*}.log | cut -c1-200
done
