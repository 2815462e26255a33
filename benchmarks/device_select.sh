#!/usr/bin/env bash
# H200 session for selection (issue 10), from the repo root, writing under $OUT:
#  1. calibrate the cost model on the device over the fit shapes (model stored in the cache, no
#     tuned records), then per held-out corpus
#  2. auto through run-from-cache (the stored model; nothing tuned), verified, with cuDNN, and
#  3. every candidate of the search space timed (calibrate --dry-run): the tuned reference;
#  4. tune on first use across processes (the second imports the first's export, times nothing).
# Carried: .whl and the exported sm_90 cache given as $1.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
python3 -m skwgrad cache import "$1" --cache /tmp/cb | tail -1
export SKWGRAD_CACHE=/tmp/cb
t0=$(date +%s)
timeout 200 python3 -m skwgrad calibrate --model-only --corpus benchmarks/shapes/fit_dense.csv \
  --corpus benchmarks/torch_shapes/resnet50_b32_bf16.csv --out "$OUT/calib_fit.json" 2> "$OUT/calib_fit.log" | tail -1
echo "calibrate rc=$? $(( $(date +%s) - t0 )) s"
for c in tests/data/wgrad_shapes.csv tests/data/wgrad_shapes_unseen.csv benchmarks/shapes/heldout_2026-12-01.csv; do
  n=$(basename "$c" .csv)
  timeout 150 python3 -m skwgrad run-from-cache --corpus "$c" --verify --bench --baseline cudnn --iters 30 \
    --out "$OUT/auto_$n.json" > "$OUT/auto_$n.log" 2>&1; echo "auto $n rc=$? $(( $(date +%s) - t0 )) s"; tail -2 "$OUT/auto_$n.log"
  timeout 150 python3 -m skwgrad calibrate --dry-run --corpus "$c" --out "$OUT/all_$n.json" 2> "$OUT/all_$n.log" | tail -1
  echo "all $n rc=$? $(( $(date +%s) - t0 )) s"
done
rm -rf /tmp/t1 /tmp/t2
python3 -m skwgrad cache import "$1" --cache /tmp/t1 > "$OUT/tune.log" 2>&1
timeout 100 python3 benchmarks/gpu_tune_first_use.py first --cache /tmp/t1 --out "$OUT/tune_first.json" >> "$OUT/tune.log" 2>&1
python3 -m skwgrad cache export /tmp/tuned.tar --cache /tmp/t1 >> "$OUT/tune.log" 2>&1
python3 -m skwgrad cache import /tmp/tuned.tar --cache /tmp/t2 >> "$OUT/tune.log" 2>&1
timeout 60 python3 benchmarks/gpu_tune_first_use.py second --cache /tmp/t2 --out "$OUT/tune_second.json" --against "$OUT/tune_first.json" >> "$OUT/tune.log" 2>&1
tail -1 "$OUT/tune.log"; echo "done $(( $(date +%s) - t0 )) s"
