#!/usr/bin/env bash
# H200, session 18 run W4 (issue 10): auto against tuned over the whole search space on the two sets
# drawn this session (random_2026120483 dense, random_g_2026120483 grouped; every dtype): auto
# through run-from-cache (verified, cuDNN beside), and every candidate timed (calibrate --dry-run),
# compared by benchmarks/compare_auto_tuned.py. W3 judged auto against the best of ~10 launches.
# Carried: .whl, .device/w3.tar.xz.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 SKWGRAD_CACHE=/tmp/pc
t0=$(date +%s)
rm -rf /tmp/pc; python3 -m skwgrad cache import .device/w3.tar.xz --cache /tmp/pc | tail -1
for s in random_2026120483 random_g_2026120483; do
  c=benchmarks/shapes/$s.csv
  timeout 120 python3 -m skwgrad run-from-cache --cache /tmp/pc --corpus $c --verify --bench --baseline cudnn --iters 30 \
    --out $OUT/auto_$s.json > $OUT/auto_$s.log 2>&1; echo "auto $s rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $OUT/auto_$s.log
  timeout 200 python3 -m skwgrad calibrate --cache /tmp/pc --dry-run --corpus $c --out $OUT/all_$s.json 2> $OUT/all_$s.log | tail -1
  echo "all $s rc=$? $(( $(date +%s) - t0 )) s"
done
