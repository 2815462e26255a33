#!/usr/bin/env bash
# H200, session 14 run S4 (issue 12): stream-K and persistent TMA kernels timed beside the rest, for the fit.
#  - .device/pc.tar.xz: `compile-all --preset default --arch sm_90 --corpus tests/data/wgrad_shapes.csv
#    --corpus benchmarks/shapes/random_2026120343.csv --corpus benchmarks/shapes/random_2026120344.csv
#    --corpus benchmarks/shapes/random_2026120345.csv`
#    and random_2026120345 (built in, not run: kept for S5);
#  - benchmarks/gpu_tma_auto.py on the corpus, random_2026120343 and random_2026120344 (the best
#    launch of each TMA mode timed too), every timed launch verified with dW poisoned.
# Carried: .whl, .device/pc.tar.xz. Everything lands in $OUT.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 SKWGRAD_CACHE=/tmp/pc
t0=$(date +%s)
python3 -m skwgrad cache import .device/pc.tar.xz --cache /tmp/pc | tail -1
timeout 420 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --corpus tests/data/wgrad_shapes.csv \
  --corpus benchmarks/shapes/random_2026120343.csv --corpus benchmarks/shapes/random_2026120344.csv \
  --no-end-to-end --out $OUT/tma_auto.json > $OUT/tma_auto.log 2>&1
echo "tma_auto rc=$? $(( $(date +%s) - t0 )) s"; grep -c "ok=True" $OUT/tma_auto.log; grep -v "ok=True" $OUT/tma_auto.log | tail -20
