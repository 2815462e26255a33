#!/usr/bin/env bash
# H200, session 16 run U4 (issue 11): the 7x7 stride-1 window kernel at 32 channels per CTA (one
# 16-byte vector per thread per strip; sweep.DWCONV_WINDOW_BC_WAVE32) against the 16 it had, through
# the product (run-from-cache, auto's own pick, split degree and epilogue), ABBA on two caches that
# differ only there, every row verified against float64 beside cuDNN in benchmark mode.
# Shapes: benchmarks/shapes/dw7_window_2026120301.csv (10 stride-1 7x7 depthwise rows, 6 new, 4
# from earlier drawn sets). Caches built here with compile-all --corpus at this commit (u4new) and
# with DWCONV_WINDOW_BC_WAVE32 = {} (u4old, the 16-channel kernels); `cache export`, xz.
# Carried: .whl, .device/u4old.tar.xz, .device/u4new.tar.xz.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
t0=$(date +%s)
for c in old new; do
  rm -rf /tmp/$c; python3 -m skwgrad cache import .device/u4$c.tar.xz --cache /tmp/$c | tail -1
done
i=0
for c in old new new old; do
  i=$((i + 1))
  timeout 100 python3 -m skwgrad run-from-cache --cache /tmp/$c --corpus benchmarks/shapes/dw7_window_2026120301.csv \
    --verify --bench --baseline cudnn --iters 50 --out $OUT/u4_${i}_$c.json > $OUT/u4_${i}_$c.log 2>&1
  echo "pass $i $c rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $OUT/u4_${i}_$c.log | cut -c1-250
done
