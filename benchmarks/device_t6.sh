#!/usr/bin/env bash
# H200, session 15 run T6 (issues 11, 10): grouped TMA tiles priced by the diagonal blocks they store
# (commit "cost model: a grouped TMA tile's stores ..."), judged on random_g_2026120353, drawn before
# that change and used by no decision:
#  - benchmarks/gpu_tma_auto.py --top 8: auto against auto without the TMA kernels and cuDNN, the
#    model's top 8 TMA launches timed too (so the previous model's pick is among the timed ones),
#    every timed launch verified (16-bit rows);
#  - run-from-cache --verify --bench --baseline cudnn (benchmark mode) on the set, all dtypes.
# Carried: .whl, .device/t6.tar.xz (`compile-all --preset default --arch sm_90 --corpus` the set).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
t0=$(date +%s)
rm -rf /tmp/pc; python3 -m skwgrad cache import .device/t6.tar.xz --cache /tmp/pc | tail -1
timeout 150 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --no-end-to-end --top 8 --corpus benchmarks/shapes/random_g_2026120353.csv \
  --out $OUT/tma_auto_g53.json > $OUT/tma_auto_g53.log 2>&1
echo "tma_auto g53 rc=$? $(( $(date +%s) - t0 )) s"; cut -c1-200 $OUT/tma_auto_g53.log | tail -n 18
timeout 100 python3 -m skwgrad run-from-cache --cache /tmp/pc --corpus benchmarks/shapes/random_g_2026120353.csv --verify --bench \
  --baseline cudnn --iters 30 --out $OUT/auto_g53.json > $OUT/auto_g53.log 2>&1
echo "auto g53 rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $OUT/auto_g53.log | cut -c1-200
