#!/usr/bin/env bash
# H200, session 23: the GPU launcher suite on its own cache (suite4) after the depthwise selection changes
# (the window choice now computed before the TMA family is weighed against it). Carried: .whl, .device/suite4.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/suite4.tar.xz
SKWGRAD_CACHE=/tmp/pc timeout 300 python3 -m pytest -q -m gpu tests/test_gpu_launcher.py -p no:cacheprovider > $OUT/gpu_suite.log 2>&1
echo "suite rc=$?"; tail -3 $OUT/gpu_suite.log
