#!/usr/bin/env bash
# H200, session 22 (issues 10, 12): why the TMA loop with co-resident CTAs is slow on large planes.
# Nsight Compute on one launch, the same kernel and split (64x64 three-CTA, fp32 atomic, ks 11) of two
# layers with the same GEMM (M 32, N 96x49, reduction 50176) that differ only in plane and batch:
# 7x7 96->32 at 112 px N=4 (A2: 149 us, 1.74x the Triton stream-K launch) and at 28 px N=64; and the
# 64x128 two-CTA persistent launch of the 112 px layer. Carried: .whl, .device/a2.tar.xz.
set -uo pipefail
K=wgrad_tma_bf16_dwfp32_2d_v8v8_64x64x64_t1_w4s4r80_atomic
P=wgrad_tma_bf16_dwfp32_2d_v8v8_64x128x64_t1_w4s4r128_persistent_atomic
bash benchmarks/gpu_profile_candidates.sh .device/a2.tar.xz hires "n=4,c=96,k=32,h=112,w=112,y=7,x=7,padding=3,dtype=bf16,dw_dtype=fp32" $K:0:11 $P:264:9
bash benchmarks/gpu_profile_candidates.sh .device/a2.tar.xz lowres "n=64,c=96,k=32,h=28,w=28,y=7,x=7,padding=3,dtype=bf16,dw_dtype=fp32" $K:0:11 $P:264:9
