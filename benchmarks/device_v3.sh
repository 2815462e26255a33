#!/usr/bin/env bash
# H200, session 17 run V3:
#  - the PyTorch op after its registration moved from torch.library.custom_op to Library define +
#    impl (V2 timed the custom op at 113 / 65 us per call against 47 / 23 us for its Python body):
#    the same two calls, and a compiled (default mode) stack of 1x1 convolutions, patched vs not;
#  - issue 10: the cost model with unit_tma (model 10) on two sets drawn after V1's analysis
#    (random_2026120463 dense, random_g_2026120463 grouped) through benchmarks/gpu_tma_auto.py,
#    auto against the 3 best-ranked non-TMA and 6 best-ranked TMA launches, every one verified.
# Carried: .whl, .device/v3.tar.xz (run V1's cache plus these sets' kernels).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 SKWGRAD_CACHE=/tmp/pc
t0=$(date +%s)
rm -rf /tmp/pc; python3 -m skwgrad cache import .device/v3.tar.xz --cache /tmp/pc | tail -1
timeout 240 python3 benchmarks/gpu_op_hostcost.py --problem "n=4,c=64,k=64,h=28,w=28,y=1,x=1,dtype=bf16" \
  --problem "n=1,c=192,k=128,h=56,w=56,y=3,x=3,stride=2,padding=1,dtype=bf16,dw_dtype=fp32" --stack 6,8,64,28 \
  --out $OUT/op_hostcost.json > $OUT/op_hostcost.log 2>&1
echo "op_hostcost rc=$? $(( $(date +%s) - t0 )) s"; grep -E '^\{' $OUT/op_hostcost.log | cut -c1-400
timeout 300 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --top 6 --top-old 3 --corpus benchmarks/shapes/random_2026120463.csv \
  --corpus benchmarks/shapes/random_g_2026120463.csv --out $OUT/tma_auto_63.json > $OUT/tma_auto_63.log 2>&1
echo "tma_auto 63 rc=$? $(( $(date +%s) - t0 )) s"; tail -3 $OUT/tma_auto_63.log | cut -c1-600
