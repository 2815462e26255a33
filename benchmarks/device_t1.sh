#!/usr/bin/env bash
# H200, session 15 run T1 (issue 11, grouped): grouped convolutions through the TMA im2col family,
# GB groups packed to a tile (skwgrad/aot/kernels/tma.py).
#  - the GPU suite (tests/test_gpu_launcher.py) with its new TMA cases: every epilogue, the
#    persistent and stream-K walks, dense and grouped (8, 3 and 1 groups per tile), dW and the
#    workspace poisoned, against float64;
#  - benchmarks/gpu_tma_auto.py on the grouped held-out sets random_g_2026120351 (drawn this session
#    before any change) and random_g_2026120334 (drawn in session 13, never run): auto (TMA included)
#    against auto without the TMA kernels and cuDNN, every timed launch verified;
#  - run-from-cache --verify --bench --baseline cudnn on random_g_2026120351 (all dtypes).
# Carried: .whl, .device/t1.tar.xz (`compile-all --preset default --arch sm_90 --corpus` the corpus,
# both grouped sets and random_2026120351), .device/tk.tar.xz (`python tests/test_gpu_launcher.py
# build-cache`). Everything lands in $OUT.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m skwgrad cache import .device/t1.tar.xz --cache /tmp/pc | tail -1
python3 -m skwgrad cache import .device/tk.tar.xz --cache /tmp/tk | tail -1
SKWGRAD_CACHE=/tmp/tk timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_launcher.py -p no:cacheprovider > $OUT/gpu_suite.log 2>&1
echo "gpu suite rc=$? $(( $(date +%s) - t0 )) s"; tail -4 $OUT/gpu_suite.log
timeout 260 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --no-end-to-end --corpus benchmarks/shapes/random_g_2026120351.csv \
  --corpus benchmarks/shapes/random_g_2026120334.csv --out $OUT/tma_auto_grouped.json > $OUT/tma_auto_grouped.log 2>&1
echo "tma_auto rc=$? $(( $(date +%s) - t0 )) s"; cat $OUT/tma_auto_grouped.log | cut -c1-230
timeout 80 python3 -m skwgrad run-from-cache --cache /tmp/pc --corpus benchmarks/shapes/random_g_2026120351.csv --verify --bench \
  --baseline cudnn --iters 30 --out $OUT/auto_random_g51.json > $OUT/auto_random_g51.log 2>&1
echo "auto random_g51 rc=$? $(( $(date +%s) - t0 )) s"; tail -20 $OUT/auto_random_g51.log | cut -c1-250
