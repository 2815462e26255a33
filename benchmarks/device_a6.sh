#!/usr/bin/env bash
# H200, session 22: the end state. (1) The GPU launcher suite on its own cache (selection changed: the fill
# ceiling and cost model 12). (2) Depthwise and grouped layers through run-from-cache (issue 11 status) on
# random_dw_2026120416, drawn before this run: auto's pick per row, verified, against cuDNN.
# Build (CPU): the suite's cache is session 21's (.device/suite4.tar.xz, the same kernel sources);
#   cp -r .device/a4cache .device/a6cache; skwgrad compile-all --preset default --arch sm_90 --corpus
#   benchmarks/shapes/random_dw_2026120416.csv --cache .device/a6cache; skwgrad cache export.
#   Carried: .whl, .device/suite4.tar.xz, .device/a6.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/suite4.tar.xz
SKWGRAD_CACHE=/tmp/pc timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_launcher.py -p no:cacheprovider > $OUT/gpu_suite.log 2>&1
echo "gpu suite rc=$? $(( $(date +%s) - t0 )) s"; tail -2 $OUT/gpu_suite.log | cut -c1-300
rm -rf /tmp/pc; python3 -m skwgrad cache import .device/a6.tar.xz --cache /tmp/pc | tail -1
c=benchmarks/shapes/random_dw_2026120416.csv
timeout 200 python3 -m skwgrad run-from-cache --cache /tmp/pc --corpus $c --verify --bench --baseline cudnn --iters 30 \
  --out $OUT/auto_dw16.json > $OUT/auto_dw16.log 2>&1; echo "auto dw16 rc=$? $(( $(date +%s) - t0 )) s"; tail -30 $OUT/auto_dw16.log | cut -c1-60,150-230
