#!/usr/bin/env bash
# H200 session 10, run I4 (from the repo root). Carried: .whl, .device/{g3,r,p}.tar.xz.
#  1. the GPU suite on the GPU-test kernels (the row-tiled scatter of the pad kernel)
#  2. gpu_padding.py --e2e on the 15 unaligned layers: the copies' cost, refit of padding_us
#  3. random_g_2026120230 (drawn before this run): auto (+ cuDNN), every candidate, duel, on the
#     new default (r.tar.xz: 64x128 packed tiles); auto on the session-9 default (p.tar.xz) beside
#  4. auto over the corpus on the new default, verified, against cuDNN
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m skwgrad cache import .device/g3.tar.xz --cache /tmp/gc | tail -1
SKWGRAD_CACHE=/tmp/gc timeout 240 python3 -m pytest -q -m gpu tests/test_gpu_launcher.py -p no:cacheprovider > $OUT/gpu_suite.log 2>&1
echo "suite rc=$? $(( $(date +%s) - t0 )) s"; tail -2 $OUT/gpu_suite.log
python3 -m skwgrad cache import .device/r.tar.xz --cache /tmp/rc | tail -1
timeout 200 python3 benchmarks/gpu_padding.py --e2e --cache /tmp/rc --corpus benchmarks/shapes/v1_unaligned.csv \
  --corpus benchmarks/shapes/v1_stem.csv --budget-s 170 --out $OUT/padding.json > $OUT/padding.log 2>&1
echo "padding rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $OUT/padding.log
G=benchmarks/shapes/random_g_2026120230.csv
timeout 150 python3 -m skwgrad run-from-cache --cache /tmp/rc --corpus $G --verify --bench --baseline cudnn --iters 30 --out $OUT/auto_g30.json > $OUT/auto_g30.log 2>&1
echo "auto g30 rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $OUT/auto_g30.log
timeout 150 python3 -m skwgrad calibrate --cache /tmp/rc --dry-run --corpus $G --out $OUT/all_g30.json 2> $OUT/all_g30.log | tail -1
echo "all g30 rc=$? $(( $(date +%s) - t0 )) s"
timeout 150 python3 benchmarks/duel_auto_tuned.py --cache /tmp/rc --all $OUT/all_g30.json --budget-s 120 --out $OUT/duel_g30.json > $OUT/duel_g30.log 2>&1
echo "duel g30 rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $OUT/duel_g30.log
python3 -m skwgrad cache import .device/p.tar.xz --cache /tmp/pc | tail -1
timeout 150 python3 -m skwgrad run-from-cache --cache /tmp/pc --corpus $G --verify --bench --baseline cudnn --iters 30 --out $OUT/auto_g30_old.json > $OUT/auto_g30_old.log 2>&1
echo "auto g30 old rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $OUT/auto_g30_old.log
timeout 170 python3 -m skwgrad run-from-cache --cache /tmp/rc --corpus tests/data/wgrad_shapes.csv --verify --bench --baseline cudnn --iters 30 --out $OUT/auto_corpus.json > $OUT/auto_corpus.log 2>&1
echo "auto corpus rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $OUT/auto_corpus.log
