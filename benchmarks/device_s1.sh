#!/usr/bin/env bash
# H200, session 14 run S1 (issues 12 and 10): the TMA im2col family (wgrad_tma) in the product.
#  - .device/pc.tar.xz: `compile-all --preset default --arch sm_90 --corpus tests/data/wgrad_shapes.csv
#    --corpus benchmarks/shapes/random_2026120334.csv --corpus benchmarks/shapes/random_2026120341.csv`
#    (258 kernels of this commit's source, TMA kernels included);
#  - benchmarks/gpu_tma_auto.py: per dense 16-bit row, auto (with the TMA kernels), the best other
#    family (auto before them), the best of the top TMA candidates, cuDNN, one pass, every timed
#    launch verified against float64 with dW poisoned; the torch op end to end beside PyTorch's;
#  - run-from-cache --verify --bench --baseline cudnn on the held-out set drawn this session (all dtypes).
# Carried: .whl, .device/pc.tar.xz. Everything lands in $OUT.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 SKWGRAD_CACHE=/tmp/pc
t0=$(date +%s)
python3 -m skwgrad cache import .device/pc.tar.xz --cache /tmp/pc | tail -1
timeout 420 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --corpus tests/data/wgrad_shapes.csv \
  --corpus benchmarks/shapes/random_2026120334.csv --corpus benchmarks/shapes/random_2026120341.csv \
  --out $OUT/tma_auto.json > $OUT/tma_auto.log 2>&1
echo "tma_auto rc=$? $(( $(date +%s) - t0 )) s"; tail -80 $OUT/tma_auto.log
timeout 120 python3 -m skwgrad run-from-cache --cache /tmp/pc --corpus benchmarks/shapes/random_2026120341.csv --verify --bench \
  --baseline cudnn --iters 30 --out $OUT/auto_random41.json > $OUT/auto_random41.log 2>&1
echo "auto random41 rc=$? $(( $(date +%s) - t0 )) s"; tail -4 $OUT/auto_random41.log
