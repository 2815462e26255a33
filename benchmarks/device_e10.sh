#!/usr/bin/env bash
# H200, session 26: the GPU launcher suite after the tests' graph-capture helper (9c08d3d), on its own cache.
# Carried: .whl, .device/suite4.tar.xz (the suite's kernels of bf5a507's source, unchanged since).
set -uo pipefail
source benchmarks/device_setup.sh .device/suite4.tar.xz
mkdir -p /tmp/o
SKWGRAD_CACHE=/tmp/pc timeout 150 python3 -m pytest -q -m gpu tests/test_gpu_launcher.py -p no:cacheprovider > /tmp/o/gpu_suite.log 2>&1
echo "gpu suite rc=$? $(( $(date +%s) - t0 )) s"; grep -E "passed|failed|Error" /tmp/o/gpu_suite.log | tail -6 | cut -c1-300
tar -C /tmp/o -cJf $OUT/e10.tar.xz .
