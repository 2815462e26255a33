#!/usr/bin/env bash
# H200, session 17 run V2: where the PyTorch op's host time goes (V1: the custom op called in eager
# cost 55-130 us per call against 13-40 us for skwgrad.wgrad on the same tensors).
# Carried: .whl, .device/v1.tar.xz (run V1's cache).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 SKWGRAD_CACHE=/tmp/pc
rm -rf /tmp/pc; python3 -m skwgrad cache import .device/v1.tar.xz --cache /tmp/pc | tail -1
timeout 200 python3 benchmarks/gpu_op_hostcost.py --problem "n=4,c=64,k=64,h=28,w=28,y=1,x=1,dtype=bf16" \
  --problem "n=1,c=192,k=128,h=56,w=56,y=3,x=3,stride=2,padding=1,dtype=bf16,dw_dtype=fp32" --out $OUT/op_hostcost.json 2>&1 | cut -c1-220
