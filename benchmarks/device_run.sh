#!/usr/bin/env bash
# One call on the GPU machine: launcher GPU tests, run-from-cache over the corpus, kernel bench.
# Expects (carried from the build machine): .whl/ (fetch-wheels.sh), .devcarry/gputest.tar.xz (a
# cache dir), .devcarry/corpus.skwgrad.xz (`skwgrad cache export`, xz'd), .devcarry/kernels.tar.xz.
# Writes everything under $OUT.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
tar -xJf .devcarry/gputest.tar.xz
python3 -c "import lzma, shutil; shutil.copyfileobj(lzma.open('.devcarry/corpus.skwgrad.xz'), open('.devcarry/corpus.skwgrad', 'wb'))" && python3 -m skwgrad.cli cache import .devcarry/corpus.skwgrad --cache .devcache/corpus | tail -1
mkdir -p .device && tar -C .device -xJf .devcarry/kernels.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
git rev-parse --short HEAD 2>/dev/null

echo "== launcher GPU tests"
SKWGRAD_CACHE=.devcache/gputest timeout "${T_TESTS:-150}" python3 -m pytest -q -m gpu -s -p no:cacheprovider \
    tests/test_gpu_launcher.py > "$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "host|passed|failed|error" "$OUT/gpu_tests.log" | tail -6

echo "== run-from-cache over the corpus"
timeout "${T_RFC:-170}" python3 -m skwgrad.cli run-from-cache --corpus tests/data/wgrad_shapes.csv --verify --bench \
    --baseline cudnn --iters 30 --json "$OUT/run_from_cache.json" --cache .devcache/corpus > "$OUT/run_from_cache.log" 2>&1
echo "run-from-cache rc=$?"; tail -30 "$OUT/run_from_cache.log"

echo "== kernel bench"
timeout "${T_BENCH:-230}" python3 benchmarks/gpu_kernels.py bench --kernels .device/kernels \
    --corpus tests/data/wgrad_shapes.csv --out "$OUT" --reps 20 > "$OUT/bench.log" 2>&1
echo "bench rc=$?"; tail -27 "$OUT/bench.log"
