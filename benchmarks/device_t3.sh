#!/usr/bin/env bash
# H200, session 15 run T3 (issues 12 and 11): does a deeper TMA ring pay? Runs T1/T2 put the 14x14
# grouped rows at ~0.3 us per 64-row step on one CTA per SM with 4 slots in flight (latency-bound
# arithmetic, not the matrix units). The cache is T1's plus 96 twins of the default TMA kernels
# (bf16 and fp16) with 4-8 slot rings (64x64: 6 and 8; 64x128, 128x64, 128x128: 6; 128x256: 4;
# 64x256: 5). benchmarks/gpu_tma_auto.py --stage-twins: each TMA entrant's twins at its own launch
# setting, every launch verified, interleaved rounds; on random_g_2026120351, the corpus and
# random_2026120351.
# Carried: .whl, .device/t1.tar.xz. Everything lands in $OUT.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
t0=$(date +%s)
rm -rf /tmp/pc; python3 -m skwgrad cache import .device/t1.tar.xz --cache /tmp/pc | tail -1
for set in g51:benchmarks/shapes/random_g_2026120351.csv corpus:tests/data/wgrad_shapes.csv d51:benchmarks/shapes/random_2026120351.csv; do
  timeout 170 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --no-end-to-end --top 3 --stage-twins 3,4,5,6,8 \
    --corpus ${set#*:} --out $OUT/twins_${set%%:*}.json > $OUT/twins_${set%%:*}.log 2>&1
  echo "twins ${set%%:*} rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $OUT/twins_${set%%:*}.log | cut -c1-300
done
