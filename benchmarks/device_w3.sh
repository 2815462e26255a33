#!/usr/bin/env bash
# H200, session 18 run W3 (issue 10): selection at HEAD (session 17's refitted constants) on sets
# drawn this session before the run (random_2026120483 dense, random_g_2026120483 grouped):
#  - benchmarks/gpu_tma_auto.py on their 16-bit rows: auto, the 3 best-ranked non-TMA launches and
#    the 6 best-ranked TMA launches, each verified against float64, timed in one process beside
#    cuDNN (benchmark mode); the timings also judge, offline, the unshipped price of the dense TMA
#    fp32-atomic loop (session 17's lead);
#  - their fp32 (tf32) rows (benchmarks/shapes/fp32_2026120483.csv): auto through run-from-cache
#    and every candidate of the search space (calibrate --dry-run), auto against tuned.
# Carried: .whl, .device/w3.tar.xz (compile-all --preset default --arch sm_90 over both sets).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 SKWGRAD_CACHE=/tmp/pc
t0=$(date +%s)
rm -rf /tmp/pc; python3 -m skwgrad cache import .device/w3.tar.xz --cache /tmp/pc | tail -1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
timeout 360 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --top 6 --top-old 3 --corpus benchmarks/shapes/random_2026120483.csv \
  --corpus benchmarks/shapes/random_g_2026120483.csv --out $OUT/tma_auto_83.json > $OUT/tma_auto_83.log 2>&1
echo "tma_auto 83 rc=$? $(( $(date +%s) - t0 )) s"; cut -c1-200 $OUT/tma_auto_83.log | tail -42
c=benchmarks/shapes/fp32_2026120483.csv
timeout 80 python3 -m skwgrad run-from-cache --cache /tmp/pc --corpus $c --verify --bench --baseline cudnn --iters 30 \
  --out $OUT/auto_fp32_83.json > $OUT/auto_fp32_83.log 2>&1; echo "auto fp32 rc=$? $(( $(date +%s) - t0 )) s"; tail -2 $OUT/auto_fp32_83.log
timeout 150 python3 -m skwgrad calibrate --cache /tmp/pc --dry-run --corpus $c --out $OUT/all_fp32_83.json 2> $OUT/all_fp32_83.log | tail -1
echo "all fp32 rc=$? $(( $(date +%s) - t0 )) s"
