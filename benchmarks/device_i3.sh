#!/usr/bin/env bash
# H200 session 10, run I3 (from the repo root): the GPU suite on the GPU-test kernels, the faster
# pad kernel (copies' cost, end to end) and packed-group tiles wider than 64 columns (every
# candidate timed). Carried: .whl, .device/{g2,q,gx}.tar.xz. Outputs under $OUT.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
t0=$(date +%s)
python3 -m skwgrad cache import .device/g2.tar.xz --cache /tmp/gc | tail -1
SKWGRAD_CACHE=/tmp/gc timeout 240 python3 -m pytest -q -m gpu tests/test_gpu_launcher.py -p no:cacheprovider > $OUT/gpu_suite.log 2>&1
echo "suite rc=$? $(( $(date +%s) - t0 )) s"; tail -3 $OUT/gpu_suite.log
python3 -m skwgrad cache import .device/q.tar.xz --cache /tmp/qc | tail -1
timeout 240 python3 benchmarks/gpu_padding.py --e2e --cache /tmp/qc --corpus benchmarks/shapes/v1_unaligned.csv \
  --corpus benchmarks/shapes/v1_stem.csv --budget-s 200 --out $OUT/padding.json > $OUT/padding.log 2>&1
echo "padding rc=$? $(( $(date +%s) - t0 )) s"; tail -25 $OUT/padding.log
python3 -m skwgrad cache import .device/gx.tar.xz --cache /tmp/gx | tail -1
timeout 200 python3 -m skwgrad calibrate --cache /tmp/gx --dry-run --corpus benchmarks/shapes/grouped_packed_2026-12-02.csv \
  --out $OUT/all_grouped_packed.json 2> $OUT/all_grouped_packed.log | tail -1
echo "grouped rc=$? $(( $(date +%s) - t0 )) s"
