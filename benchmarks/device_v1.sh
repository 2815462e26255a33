#!/usr/bin/env bash
# H200, session 17 run V1 (issues 10, 11): HEAD's selection on three sets drawn at the start of the
# session and committed before any change (random_2026120461 dense, random_g_2026120461 grouped,
# random_dw_2026120462 depthwise and grouped), plus T5's two depthwise sets after session 16's 7x7
# window kernel and split refit:
#  - benchmarks/gpu_tma_auto.py on the dense and grouped 16-bit rows: auto, the 3 best-ranked
#    launches of the non-TMA families and the 6 best-ranked TMA launches, every one verified
#    against float64 and timed in one process beside cuDNN (benchmark mode), plus the user's call
#    end to end (host included); the timings also feed the refit of the TMA constants;
#  - run-from-cache --verify --bench --baseline cudnn on the depthwise sets (all dtypes).
# Carried: .whl, .device/v1.tar.xz (compile-all --preset default --arch sm_90 over the five sets).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 SKWGRAD_CACHE=/tmp/pc  # the end-to-end calls open the default cache
t0=$(date +%s)
rm -rf /tmp/pc; python3 -m skwgrad cache import .device/v1.tar.xz --cache /tmp/pc | tail -1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
timeout 330 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --top 6 --top-old 3 --corpus benchmarks/shapes/random_2026120461.csv \
  --corpus benchmarks/shapes/random_g_2026120461.csv --out $OUT/tma_auto_61.json > $OUT/tma_auto_61.log 2>&1
echo "tma_auto 61 rc=$? $(( $(date +%s) - t0 )) s"; cut -c1-200 $OUT/tma_auto_61.log | tail -45
for set in ${V1_SETS:-dw62:benchmarks/shapes/random_dw_2026120462.csv dw34:benchmarks/shapes/random_dw_2026120334.csv} dw42:benchmarks/shapes/random_dw_2026120342.csv; do
  timeout 100 python3 -m skwgrad run-from-cache --cache /tmp/pc --corpus ${set#*:} --verify --bench --baseline cudnn --iters 30 \
    --out $OUT/auto_${set%%:*}.json > $OUT/auto_${set%%:*}.log 2>&1
  echo "auto ${set%%:*} rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $OUT/auto_${set%%:*}.log | cut -c1-200
done
