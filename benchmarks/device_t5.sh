#!/usr/bin/env bash
# H200, session 15 run T5: run-from-cache's cuDNN baseline in benchmark mode (commit cda3517).
# Until then `run-from-cache --baseline cudnn` timed cuDNN's heuristic algorithm (RESULTS says
# benchmark mode): T4 saw two 7x7 layers 25-35x slower there than in gpu_tma_auto.py's baseline.
# Re-measured with the fixed baseline, each row's own auto pick, every row verified:
#  - the GPU test of the baseline's settings;
#  - T4's two sets (random_2026120352 dense, random_g_2026120352 grouped) on T4's cache;
#  - the depthwise/grouped sets S6 reported (random_dw_2026120342 / _34) on a cache built at
#    this commit (grouped rows may now take the TMA family).
# Carried: .whl, .device/t4.tar.xz, .device/t5dw.tar.xz (`compile-all --preset default --arch sm_90 --corpus` both dw sets).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_gpu_launcher.py -k cudnn_baseline_runs 2>&1 | tail -3
rm -rf /tmp/pc /tmp/pcdw
python3 -m skwgrad cache import .device/t4.tar.xz --cache /tmp/pc | tail -1
python3 -m skwgrad cache import .device/t5dw.tar.xz --cache /tmp/pcdw | tail -1
for set in d52:pc:benchmarks/shapes/random_2026120352.csv g52:pc:benchmarks/shapes/random_g_2026120352.csv \
           dw42:pcdw:benchmarks/shapes/random_dw_2026120342.csv dw34:pcdw:benchmarks/shapes/random_dw_2026120334.csv; do
  name=${set%%:*}; rest=${set#*:}; cache=${rest%%:*}; csv=${rest#*:}
  timeout 110 python3 -m skwgrad run-from-cache --cache /tmp/$cache --corpus $csv --verify --bench --baseline cudnn --iters 30 \
    --out $OUT/auto_$name.json > $OUT/auto_$name.log 2>&1
  echo "auto $name rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $OUT/auto_$name.log | cut -c1-200
done
