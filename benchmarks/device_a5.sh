#!/usr/bin/env bash
# H200, session 22 (issue 12, small channels): TMA tiles with 32-channel im2col boxes on trial (64x128 4 taps
# two CTAs an SM, plain and persistent; 64x64 2 taps three CTAs; 128x128 4 taps), so layers of 32 channels
# or fewer load full boxes (A3/A4: partial boxes cost up to twice the time per iteration). Timed apart as
# trial<i> (gpu_tma_auto --extra, 2 best-ranked launches per configuration), never auto's or a row's best;
# sets random_fewch_2026120415, random_hires_2026120409, random_3d_hires_2026120411, random_2026120412.
# Build (CPU, at the spec that allows 32-channel boxes): skwgrad compile-all --preset default --arch sm_90
#   --corpus each set --cache .device/a5cache; python benchmarks/build_tma_configs.py --cache .device/a5cache
#   --config 64x128x64t4w4s4 --config 64x64x64t2w4s4 --config 128x128x64t4w8s4 (and 64x128x64t4w4s4
#   --mode persistent); skwgrad cache export. Carried: .whl, .device/a5.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/a5.tar.xz
S=benchmarks/shapes
timeout 560 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --top 6 --top-old 3 --no-end-to-end \
  --extra 64x128x64_t4 --extra 64x64x64_t2 --extra 128x128x64_t4 --extra-n 2 \
  --corpus $S/random_fewch_2026120415.csv --corpus $S/random_hires_2026120409.csv --corpus $S/random_3d_hires_2026120411.csv \
  --corpus $S/random_2026120412.csv --out $OUT/tma_auto_a5.json > $OUT/tma_auto_a5.log 2>&1
echo "tma_auto rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $OUT/tma_auto_a5.log | cut -c1-1200
