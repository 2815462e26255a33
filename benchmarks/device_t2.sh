#!/usr/bin/env bash
# H200, session 15 run T2 (issues 11, 12, 10): after T1, on the same cache (.device/t1.tar.xz).
#  - the GPU suite's TMA cases again (T1 lost 8 of them to split counts past the test shapes' rows);
#  - benchmarks/gpu_tma_auto.py on the corpus (dense and grouped 16-bit rows) and on the dense
#    held-out set random_2026120351 (drawn this session before any change): the grouped packing
#    changed the TMA kernels' epilogue and tile walk for dense problems too;
#  - run-from-cache --verify --bench --baseline cudnn on random_2026120351 (all dtypes);
#  - gpu_tma_auto.py --top 12 on random_g_2026120351: more TMA candidates per grouped row, to see
#    what the model's top 4 left out.
# Carried: .whl, .device/t1.tar.xz, .device/tk.tar.xz. Everything lands in $OUT.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
t0=$(date +%s)
[ -d /tmp/pc ] || python3 -m skwgrad cache import .device/t1.tar.xz --cache /tmp/pc | tail -1
[ -d /tmp/tk ] || python3 -m skwgrad cache import .device/tk.tar.xz --cache /tmp/tk | tail -1
SKWGRAD_CACHE=/tmp/tk timeout 100 python3 -m pytest -q -m gpu tests/test_gpu_launcher.py -k tma -p no:cacheprovider > $OUT/gpu_tma.log 2>&1
echo "gpu tma cases rc=$? $(( $(date +%s) - t0 )) s"; tail -2 $OUT/gpu_tma.log
timeout 230 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --no-end-to-end --corpus tests/data/wgrad_shapes.csv \
  --corpus benchmarks/shapes/random_2026120351.csv --out $OUT/tma_auto_dense.json > $OUT/tma_auto_dense.log 2>&1
echo "tma_auto dense rc=$? $(( $(date +%s) - t0 )) s"; cut -c1-200 $OUT/tma_auto_dense.log
timeout 80 python3 -m skwgrad run-from-cache --cache /tmp/pc --corpus benchmarks/shapes/random_2026120351.csv --verify --bench \
  --baseline cudnn --iters 30 --out $OUT/auto_random51.json > $OUT/auto_random51.log 2>&1
echo "auto random51 rc=$? $(( $(date +%s) - t0 )) s"; tail -3 $OUT/auto_random51.log | cut -c1-200
timeout 150 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --no-end-to-end --top 12 --corpus benchmarks/shapes/random_g_2026120351.csv \
  --out $OUT/tma_top12_g51.json > $OUT/tma_top12_g51.log 2>&1
echo "tma top12 rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $OUT/tma_top12_g51.log | cut -c1-400
