#!/usr/bin/env bash
# H200, session 17 run V4: torch.compile (default mode, no CUDA graphs) of patched models now traces
# the autograd.Function (forward aten.convolution, backward skwgrad::conv_weight_grad) instead of
# calling the skwgrad::conv custom op; V3 timed the old path at 229 us more per layer a step on a
# host-bound stack. Same two op calls as V2/V3, and two compiled stacks, patched vs unpatched.
# Carried: .whl, .device/v4.tar.xz (V3's cache).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 SKWGRAD_CACHE=/tmp/pc
t0=$(date +%s)
rm -rf /tmp/pc; python3 -m skwgrad cache import .device/v4.tar.xz --cache /tmp/pc | tail -1
timeout 400 python3 benchmarks/gpu_op_hostcost.py --problem "n=4,c=64,k=64,h=28,w=28,y=1,x=1,dtype=bf16" \
  --problem "n=1,c=192,k=128,h=56,w=56,y=3,x=3,stride=2,padding=1,dtype=bf16,dw_dtype=fp32" --stack 6,8,64,28 --stack 6,32,128,56 \
  --out $OUT/op_hostcost.json > $OUT/op_hostcost.log 2>&1
echo "op_hostcost rc=$? $(( $(date +%s) - t0 )) s"; grep -E '^\{' $OUT/op_hostcost.log | cut -c1-600; tail -3 $OUT/op_hostcost.log | cut -c1-300
