#!/usr/bin/env bash
# H200, session 18 run W6 (issue 11): depthwise 3x3 stride-1 window kernels with narrower strips
# (win5r3, win4r3) against auto's win7r3, same channels per CTA and epilogue, on the 15 3x3
# stride-1 depthwise rows of W2 (benchmarks/shapes/ab_dw_window_w6.csv), each verified. W6's first
# attempt timed no win7r3: with narrower strips cached, auto ranks win4r3 first (by label).
# Carried: .whl, .device/w6.tar.xz (v1cache plus the 8 narrower-strip kernels).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 SKWGRAD_CACHE=/tmp/pc
t0=$(date +%s)
rm -rf /tmp/pc; python3 -m skwgrad cache import .device/w6.tar.xz --cache /tmp/pc | tail -1
timeout 150 python3 benchmarks/gpu_dw_window_ab.py --cache /tmp/pc --corpus benchmarks/shapes/ab_dw_window_w6.csv --modes win7r3,win5r3,win4r3 --commit "${W6_COMMIT:-}" \
  --budget-s 120 --out $OUT/dw_window_ab.json 2>&1 | cut -c1-220 | tail -20
echo "rc=$? $(( $(date +%s) - t0 )) s"
