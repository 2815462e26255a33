#!/usr/bin/env bash
# H200, session 20: the call a user makes on the three-CTA default (random_g_2026120499, Y6's grouped
# set: skwgrad.wgrad, the custom op and PyTorch's own call, host included, beside the device times
# of auto and before), and the GPU suite's TMA cases (now with a three-CTA kind) on a cache of their
# own, so the suite's kernels never reach the A/B's selection (Y3's lesson).
# Build (CPU): Y6's export (.device/y6.tar.xz); python tests/test_gpu_launcher.py build-cache .device/suitecache;
#   skwgrad cache export --cache .device/suitecache .device/suite.tar.xz. Carried: .whl, both exports.
set -uo pipefail
source benchmarks/device_setup.sh .device/y6.tar.xz
rm -rf /tmp/pc2; python3 -m skwgrad cache import .device/suite.tar.xz --cache /tmp/pc2 | tail -1
SKWGRAD_CACHE=/tmp/pc2 timeout 100 python3 -m pytest -q -m gpu tests/test_gpu_launcher.py -k tma -p no:cacheprovider > $OUT/gpu_tma.log 2>&1
echo "gpu suite rc=$? $(( $(date +%s) - t0 )) s"; tail -3 $OUT/gpu_tma.log | cut -c1-300
timeout 150 python3 benchmarks/gpu_tma_regs_ab.py --cache /tmp/pc --commit "${X_COMMIT:-}" --budget-s 100 --before-only \
  --exclude-regs 80 --end-to-end --corpus benchmarks/shapes/random_g_2026120499.csv \
  --out $OUT/tma_regs3_e2e_y7.json 2>&1 | cut -c1-200 | tail -18
echo "ab rc=$? $(( $(date +%s) - t0 )) s"
