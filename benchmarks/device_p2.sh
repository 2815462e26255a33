#!/usr/bin/env bash
# H200, session 11 run P2: the software-pipelined window kernels (gpu_depthwise.py --set pipe-tune,
# built into the sm_90 default at this source) against the default's unpipelined ones: every
# dwconv / grouped candidate of each row launched with dW and workspace poisoned, checked against
# float64, then timed at 2-16 CTAs per SM, cuDNN beside (gpu_depthwise.py run). Carried: .whl,
# .device/n.tar.xz.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
R=/tmp/p2; mkdir -p $R
python3 -m skwgrad cache import .device/n.tar.xz --cache /tmp/cc | tail -1
ROWS=mnv2_dw3x3_144ch_56,convnext_dw7x7_384ch_14,convnext_dw7x7_96ch_56,mnv2_dw3x3_32ch_112,mnv2_dw3x3_960ch_7,effnet_dw5x5_240ch_28_fp16,dw3x3_144ch_56_dwfp32,dw3x3_partial_200ch_28,mnv2_dw3x3_s2_96ch_112,mnv2_dw3x3_s2_144ch_56,effnet_b0_dw5x5_s2_240_dwfp32,effnet_dw5x5_s2_672ch_14,new_dw7x7_s2_128ch_64_fp16
timeout 420 python3 benchmarks/gpu_depthwise.py run --cache /tmp/cc --only $ROWS --budget-s 380 --out $R/depthwise_p2.json > $R/depthwise_p2.log 2>&1
echo "run rc=$?"; tail -30 $R/depthwise_p2.log
tar -C $R -cJf $OUT/p2.tar.xz .
