#!/usr/bin/env bash
# H200 run: time the whole search space of every problem of the given corpora with
# `skwgrad calibrate --dry-run` (nothing stored), one JSON per corpus under $OUT. The cost model is
# fitted offline from these files (benchmarks/fit_costmodel.py) on a split of the shapes.
# Needs: .whl (sqlite-utils, pyelftools wheels) and the exported sm_90 cache given as $1.
set -uo pipefail
export_file=$1; shift
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
python3 -m skwgrad cache import "$export_file" --cache /tmp/cc >/dev/null || exit 3
export SKWGRAD_CACHE=/tmp/cc
for corpus in "$@"; do
  name=$(basename "$corpus" .csv)
  start=$(date +%s)
  timeout 280 python3 -m skwgrad calibrate --corpus "$corpus" --dry-run --warmup 3 --iters 20 --out "$OUT/calib_$name.json" 2> "$OUT/calib_$name.log" | tail -1
  echo "$name: rc=$? $(( $(date +%s) - start )) s"
done
