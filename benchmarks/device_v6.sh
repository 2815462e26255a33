#!/usr/bin/env bash
# H200, session 17 run V6 (issue 10): a grouped TMA tile's fp32 epilogue counted whole, and the refitted constants, on two sets drawn after
# that change (random_2026120466 dense, random_g_2026120466 grouped): benchmarks/gpu_tma_auto.py,
# auto against the 3 best-ranked non-TMA and 6 best-ranked TMA launches, every one verified, cuDNN in benchmark mode beside.
# Carried: .whl, .device/v6.tar.xz.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 SKWGRAD_CACHE=/tmp/pc
t0=$(date +%s)
rm -rf /tmp/pc; python3 -m skwgrad cache import .device/v6.tar.xz --cache /tmp/pc | tail -1
timeout 300 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --top 6 --top-old 3 --corpus benchmarks/shapes/random_2026120466.csv \
  --corpus benchmarks/shapes/random_g_2026120466.csv --out $OUT/tma_auto_66.json > $OUT/tma_auto_66.log 2>&1
echo "tma_auto 66 rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $OUT/tma_auto_66.log | cut -c1-600
