#!/usr/bin/env bash
# H200, session 19 (issue 11): the TMA depthwise family (dwconv_tma) in the product. The GPU suite's
# TMA cases (dwconv_tma: both epilogues, 3x3 and 5x5, partial channel / row / column blocks,
# asymmetric padding, 1..all splits; and wgrad_tma's), then auto with the family against auto
# without it (the window kernels) on dw_wide_2026120493 (14 depthwise layers of 256+ channels and 4
# of 184-200, drawn with seed 2026120493 before any was timed), and run-from-cache on that set.
# Build (CPU): skwgrad compile-all --preset default --arch sm_90 --corpus benchmarks/shapes/dw_wide_2026120493.csv
#   --cache .device/x7cache; python tests/test_gpu_launcher.py build-cache .device/x7cache; skwgrad cache
#   export --cache .device/x7cache .device/x7.tar.xz. Carried: .whl, .device/x7.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/x7.tar.xz
SKWGRAD_CACHE=/tmp/pc timeout 150 python3 -m pytest -q -m gpu tests/test_gpu_launcher.py -k tma -p no:cacheprovider > $OUT/gpu_tma.log 2>&1
echo "gpu suite rc=$? $(( $(date +%s) - t0 )) s"; tail -4 $OUT/gpu_tma.log | cut -c1-300
c=benchmarks/shapes/dw_wide_2026120493.csv
timeout 240 python3 benchmarks/gpu_dwconv_tma_ab.py --cache /tmp/pc --corpus $c --commit "${X_COMMIT:-}" --budget-s 200 \
  --out $OUT/dwconv_tma_ab_93.json 2>&1 | cut -c1-230 | tail -22
echo "ab rc=$? $(( $(date +%s) - t0 )) s"
timeout 120 python3 -m skwgrad run-from-cache --cache /tmp/pc --corpus $c --verify --bench --baseline cudnn --iters 30 \
  --out $OUT/auto_dw93.json > $OUT/auto_dw93.log 2>&1; echo "auto dw93 rc=$? $(( $(date +%s) - t0 )) s"; tail -21 $OUT/auto_dw93.log | cut -c1-60,150-230
