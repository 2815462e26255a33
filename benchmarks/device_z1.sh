#!/usr/bin/env bash
# H200, session 21 (issue 12, 3-D rows): wgrad_tma on 3-D problems through a 5-D im2col map.
# 1. The GPU suite's TMA cases (2-D kinds: every TMA kernel's kernarg block changed; 3-D kinds:
#    7 shapes x 3 kernels) on a cache of their own (Y3's lesson).
# 2. gpu_tma_3d_ab.py on random_3d_2026120401 (drawn and committed before this run) and the corpus's
#    3-D rows: auto, before (the 3-D TMA kernels left out), the model's best 3-D TMA and other
#    launches, cuDNN; every launch verified 3x against float64; the user's call end to end.
# Build (CPU): skwgrad compile-all --preset default --arch sm_90 --corpus benchmarks/shapes/random_3d_2026120401.csv
#   --corpus tests/data/wgrad_shapes.csv --cache .device/z1cache; skwgrad cache export --cache .device/z1cache .device/z1.tar.xz;
#   python tests/test_gpu_launcher.py build-cache .device/suitecache; skwgrad cache export --cache .device/suitecache
#   .device/suite.tar.xz. Carried: .whl, both exports.
set -uo pipefail
source benchmarks/device_setup.sh .device/z1.tar.xz
rm -rf /tmp/pc2; python3 -m skwgrad cache import .device/suite.tar.xz --cache /tmp/pc2 | tail -1
SKWGRAD_CACHE=/tmp/pc2 timeout 170 python3 -m pytest -q -m gpu tests/test_gpu_launcher.py -k tma -p no:cacheprovider > $OUT/gpu_tma.log 2>&1
echo "gpu suite rc=$? $(( $(date +%s) - t0 )) s"; tail -3 $OUT/gpu_tma.log | cut -c1-300; grep -E "^FAILED|Error" $OUT/gpu_tma.log | head -5 | cut -c1-300
timeout 330 python3 benchmarks/gpu_tma_3d_ab.py --cache /tmp/pc --commit "${X_COMMIT:-}" --budget-s 280 --end-to-end \
  --corpus benchmarks/shapes/random_3d_2026120401.csv --corpus tests/data/wgrad_shapes.csv \
  --out $OUT/tma_3d_z1.json 2>&1 | cut -c1-230 | tail -24
echo "ab rc=$? $(( $(date +%s) - t0 )) s"
