#!/usr/bin/env bash
# H200, session 14 run S5 (issues 12 and 10): the shipped default (no stream-K TMA) on a set drawn before S4.
#  - .device/pc.tar.xz: `compile-all --preset default --arch sm_90 --corpus tests/data/wgrad_shapes.csv
#    --corpus benchmarks/shapes/random_2026120345.csv` (random_2026120345 drawn before run S4; no fit
#    or decision of this session used it);
#  - benchmarks/gpu_tma_auto.py on the corpus and random_2026120345, every timed launch verified
#    with dW poisoned, the user's call end to end;
#  - run-from-cache --verify --bench --baseline cudnn on random_2026120345 (all dtypes, fp32 too).
# Carried: .whl, .device/pc.tar.xz. Everything lands in $OUT.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 SKWGRAD_CACHE=/tmp/pc
t0=$(date +%s)
python3 -m skwgrad cache import .device/pc.tar.xz --cache /tmp/pc | tail -1
timeout 240 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --corpus tests/data/wgrad_shapes.csv \
  --corpus benchmarks/shapes/random_2026120345.csv --out $OUT/tma_auto.json > $OUT/tma_auto.log 2>&1
echo "tma_auto rc=$? $(( $(date +%s) - t0 )) s"; grep -c "ok=True" $OUT/tma_auto.log; grep -v "ok=True" $OUT/tma_auto.log | tail -20
timeout 80 python3 -m skwgrad run-from-cache --cache /tmp/pc --corpus benchmarks/shapes/random_2026120345.csv --verify --bench \
  --baseline cudnn --iters 30 --out $OUT/auto_random45.json > $OUT/auto_random45.log 2>&1
echo "auto random45 rc=$? $(( $(date +%s) - t0 )) s"; tail -3 $OUT/auto_random45.log
