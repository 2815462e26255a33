#!/usr/bin/env bash
# H200, session 18 run W5 (issue 10): cost model 10 (the TMA loop's price on 1x1 stride-1 layers)
# on random_2026120485, drawn after the change: benchmarks/gpu_tma_auto.py on its 16-bit rows (auto,
# the 3 best-ranked non-TMA launches, the 6 best-ranked TMA launches, each verified, beside cuDNN).
# The model before (model 9's constants) is judged offline on the same timed launches.
# Carried: .whl, .device/w3.tar.xz (it holds every kernel the set needs).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 SKWGRAD_CACHE=/tmp/pc
t0=$(date +%s)
rm -rf /tmp/pc; python3 -m skwgrad cache import .device/w3.tar.xz --cache /tmp/pc | tail -1
timeout 240 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --top 6 --top-old 3 --corpus benchmarks/shapes/random_2026120485.csv \
  --out $OUT/tma_auto_85.json > $OUT/tma_auto_85.log 2>&1
echo "tma_auto 85 rc=$? $(( $(date +%s) - t0 )) s"; cut -c1-200 $OUT/tma_auto_85.log | tail -26
