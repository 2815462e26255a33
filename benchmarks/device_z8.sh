#!/usr/bin/env bash
# H200, session 21: the GPU suite's TMA cases after merging the 2-D and 3-D tests into one
# parametrization (865e82a), on 57b544a's kernels (their own cache, Z5's export).
# Carried: .whl, .device/suite4.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/suite4.tar.xz
SKWGRAD_CACHE=/tmp/pc timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_launcher.py -p no:cacheprovider > $OUT/gpu_suite.log 2>&1
echo "gpu suite rc=$? $(( $(date +%s) - t0 )) s"; tail -2 $OUT/gpu_suite.log | cut -c1-300
