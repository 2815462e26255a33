#!/usr/bin/env bash
# H200, session 18 run W2 (issue 11): the depthwise fused epilogue (one launch: the splits' sums
# cast by each tile's last split) against the two-launch epilogue it replaces (workspace + Stage-2,
# or atomic + the dW memset), same kernel configuration and split degree, on every depthwise row of
# the corpus and of four random sets (random_dw_2026120481 drawn this session before any timing),
# with auto before/after, cuDNN in benchmark mode and the user's call end to end.
# Carried: .whl, .device/w2.tar.xz (compile-all --preset default --arch sm_90 --corpus
# benchmarks/shapes/ab_fused_dw_w2.csv).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 SKWGRAD_CACHE=/tmp/pc
t0=$(date +%s)
rm -rf /tmp/pc; python3 -m skwgrad cache import .device/w2.tar.xz --cache /tmp/pc | tail -1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
timeout 420 python3 benchmarks/gpu_fused_ab.py --cache /tmp/pc --corpus benchmarks/shapes/ab_fused_dw_w2.csv --commit "${W2_COMMIT:-}" \
  --budget-s 380 --out $OUT/fused_ab.json > $OUT/fused_ab.log 2>&1
echo "fused_ab rc=$? $(( $(date +%s) - t0 )) s"; cut -c1-230 $OUT/fused_ab.log | tail -60
