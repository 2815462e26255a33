#!/usr/bin/env bash
# H200, session 21: the whole GPU suite (every family, mode and reduction, the layouts, torch, CuPy,
# CUDA graphs, the host time) on its own cache, after this session's kernarg change (the declaration
# now comes from the spec: KernelSpec.kernarg_decl) and the 3-D TMA kinds.
# Build (CPU): python tests/test_gpu_launcher.py build-cache .device/suitecache; skwgrad cache export
#   --cache .device/suitecache .device/suite.tar.xz. Carried: .whl, .device/suite.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/suite.tar.xz
SKWGRAD_CACHE=/tmp/pc timeout 300 python3 -m pytest -q -m gpu tests/test_gpu_launcher.py -p no:cacheprovider > $OUT/gpu_suite.log 2>&1
echo "gpu suite rc=$? $(( $(date +%s) - t0 )) s"; tail -4 $OUT/gpu_suite.log | cut -c1-300; grep -E "^(FAILED|ERROR)" $OUT/gpu_suite.log | head -5 | cut -c1-300
