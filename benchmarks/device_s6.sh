#!/usr/bin/env bash
# H200, session 14 run S6 (issue 11, status only): the shipped selection on the depthwise / grouped
# held-out sets drawn in sessions 13 and 14 and never run before (random_dw_2026120334,
# random_dw_2026120342), through run-from-cache: every row verified against float64, timed
# against cuDNN. Nothing of the depthwise or grouped kernels changed this session.
# Carried: .whl, .device/pcdw.tar.xz (`compile-all --preset default --arch sm_90 --corpus` both sets).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m skwgrad cache import .device/pcdw.tar.xz --cache /tmp/pc | tail -1
for n in 42:benchmarks/shapes/random_dw_2026120342.csv 34:benchmarks/shapes/random_dw_2026120334.csv; do
  timeout 75 python3 -m skwgrad run-from-cache --cache /tmp/pc --corpus ${n#*:} --verify --bench --baseline cudnn \
    --iters 30 --out $OUT/auto_dw${n%%:*}.json > $OUT/auto_dw${n%%:*}.log 2>&1
  echo "dw${n%%:*} rc=$? $(( $(date +%s) - t0 )) s"; tail -2 $OUT/auto_dw${n%%:*}.log
done
