#!/usr/bin/env bash
# H200, session 23 (issue 11): where the 7x7 window kernel's time goes, now that B1 ruled out L2 (Nsight Compute,
# one launch after two, no cache flush; SOURCE=1: stall samples per SASS instruction). auto's launches of B7:
# ConvNeXt's 384 ch 14 px (1.04x cuDNN), 760 ch 13 px N=64, and 48 ch 113 px N=64 on the 16-channel block.
# Carried: .whl, .device/b7.tar.xz.
set -uo pipefail
C=.device/b7.tar.xz
export SOURCE=1
B=benchmarks/gpu_profile_candidates.sh
bash $B $C convnext 'n=32,c=384,k=384,g=384,h=14,w=14,y=7,x=7,stride=1,padding=3,dilation=1,dtype=bf16' dwconv_bf16_2d_v8_c32t7r32_w4s1_win7_workspace:0:4
bash $B $C dw760 'n=64,c=760,k=760,g=760,h=13,w=13,y=7,x=7,stride=1,padding=3,dilation=1,dtype=bf16' dwconv_bf16_2d_v8_c32t7r32_w4s1_win7_workspace:0:2
bash $B $C dw48 'n=64,c=48,k=48,g=48,h=113,w=113,y=7,x=7,stride=1,padding=3,dilation=1,dtype=bf16' dwconv_bf16_2d_v8_c16t7r64_w4s1_win7_workspace:0:51
tar -C $OUT -cJf $OUT/b8.tar.xz prof && rm -rf $OUT/prof
ls -la $OUT
