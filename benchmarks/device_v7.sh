#!/usr/bin/env bash
# H200, session 17 run V7: the patched stack's weight gradients on the GPU after e89072c (torch.compile
# traces the autograd.Function) and 7e81ee0 (the op declared with define + impl): patched against
# unpatched from the same weights and input, eager and compiled (default mode), with who computed
# each dW; then the compiled stack's step time again.
# Carried: .whl, .device/v6.tar.xz.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 SKWGRAD_CACHE=/tmp/pc
rm -rf /tmp/pc; python3 -m skwgrad cache import .device/v6.tar.xz --cache /tmp/pc | tail -1
timeout 150 python3 benchmarks/gpu_op_hostcost.py --check 6,8,64,28 --check 3,32,128,56 --stack 6,8,64,28 --out $OUT/op_check.json 2>&1 | grep -E '^\{|Error|error' | cut -c1-900
