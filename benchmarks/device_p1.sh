#!/usr/bin/env bash
# H200, session 11 run P1: per-instruction stall samples (ncu source counters) of auto's kernels on
# the three depthwise / grouped corpus rows, and of the 64x128 split-K and stream-K kernels on
# r50_l1_3x3 at the same CTA count (G4's register-reuse lead). Carried: .whl, .device/s.tar.xz.
set -uo pipefail
C=.device/s.tar.xz
export SOURCE=1
B=benchmarks/gpu_profile_candidates.sh
bash $B $C mbv2 'n=32,c=144,k=144,g=144,h=56,w=56,y=3,x=3,stride=1,padding=1,dilation=1,dtype=bf16' dwconv_bf16_2d_v8_c16t3r64_w4s1_win7r3_workspace:0:30
bash $B $C convnext 'n=32,c=384,k=384,g=384,h=14,w=14,y=7,x=7,stride=1,padding=3,dilation=1,dtype=bf16' dwconv_bf16_2d_v8_c16t7r32_w4s1_win7_workspace:0:2
bash $B $C resnext 'n=32,c=256,k=256,g=32,h=28,w=28,y=3,x=3,stride=1,padding=1,dilation=1,dtype=bf16' grouped_bf16_2d_v8v8_g8_64x64x64_w4s3_two_stage:0:11
bash $B $C l1 'n=32,c=64,k=64,h=56,w=56,y=3,x=3,stride=1,padding=1,dilation=1,dtype=bf16' wgrad_bf16_2d_v8v8_64x128x64_w4s3_two_stage:0:53 wgrad_sk_bf16_2d_v8v8_64x128x64_w4s3_dpsk_workspace:264:1
tar -C $OUT -cJf $OUT/p1.tar.xz prof && rm -rf $OUT/prof
ls -la $OUT
