#!/usr/bin/env bash
# H200, session 19 (issue 11): where a tiny depthwise row's time goes. Nsight Compute on the TMA
# prototype (dw_tma_proto.py) at 1 and 3 steps per CTA, and on the product's launches and cuDNN's
# (gpu_profile.sh), for randdw_13_3x3s1_120to120_14 (0.7 us of memory roofline, ~11 us everywhere).
# Carried: .whl, .device/x1.tar.xz, .device/dwtma.
set -uo pipefail
source benchmarks/device_setup.sh .device/x1.tar.xz
P=$OUT/prof; mkdir -p $P
NCU="ncu --clock-control none --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis"
row=randdw_13_3x3s1_120to120_14_n32_bf16_dwfp32
timeout 150 $NCU -k regex:dw_rows python3 benchmarks/dw_tma_proto.py run --objs .device/dwtma --corpus benchmarks/shapes/ab_fused_dw_w2.csv \
  --only $row --configs bf16_k3_wt16_bc32_s3w4 --ks 32,96 --reps 2 --warmup 0 --out /tmp/p.json > $P/proto.txt 2>&1
echo "proto ncu rc=$?"; grep -E "dw_rows|Duration|Achieved Occupancy|Registers Per|Issue Slots Busy|No Eligible|Memory Throughput|Stall|Warp Cycles Per Issued" $P/proto.txt | head -40
CSV=benchmarks/shapes/ab_fused_dw_w2.csv bash benchmarks/gpu_profile.sh .device/x1.tar.xz $row 2>&1 | tail -30
mv $OUT/prof/$row.skwgrad.txt $P/product.txt 2>/dev/null; mv $OUT/prof/$row.cudnn.txt $P/cudnn.txt 2>/dev/null
grep -E "^  [a-zA-Z_].*\(|Duration" $P/cudnn.txt | head -20
