#!/usr/bin/env bash
# H200, session 28, one call. (1) Issue 12's fp32 IEEE rows: every fp32 IEEE kernel of a tile table with BK 16
# (the FMA loop; the default builds BK 32) at its best-ranked launch, against cuDNN at IEEE (allow_tf32 off), on
# the corpus's few-tiles fp32 row, the unseen dilated one and ieee_random_2026120701 (8 rows drawn for this run).
# (2) Issue 10 on fresh rows: auto (cost model 15) against the best of its 6 best-ranked TMA and 3 other launches
# on random_2026120702 (16 dense rows drawn for this run). (3) Issue 11: the depthwise row-walk prototype with the
# next row prefetched and with 16-byte vectors, on the corpus's 3x3 row and dw48_random_2026120703 (drawn for it).
# Carried: .whl, .device/f0.tar.xz (the default sm_90 cache), .device/ieee1.tar.xz (the fp32 IEEE tile table).
set -uo pipefail
source benchmarks/device_setup.sh .device/f0.tar.xz
S=benchmarks/shapes; mkdir -p /tmp/o
rm -rf /tmp/ic; python3 -m skwgrad cache import .device/ieee1.tar.xz --cache /tmp/ic | tail -1
timeout 200 python3 benchmarks/gpu_tma_auto.py --cache /tmp/ic --fp32 --each-kernel --top-old 3 --no-end-to-end \
  --corpus $S/ieee_probe_2026-12-04.csv --out /tmp/o/ieee_tiles.json > /tmp/o/ieee_tiles.log 2>&1
echo "ieee rc=$? $(( $(date +%s) - t0 )) s"; cut -c1-200 /tmp/o/ieee_tiles.log | tail -12
timeout 170 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --top 6 --top-old 3 --no-end-to-end \
  --corpus $S/random_2026120702.csv --out /tmp/o/fresh_auto.json > /tmp/o/fresh_auto.log 2>&1
echo "fresh rc=$? $(( $(date +%s) - t0 )) s"; tail -1 /tmp/o/fresh_auto.log | cut -c1-700
left=$(( 560 - ($(date +%s) - t0) ))
timeout $left python3 benchmarks/dw_vert_proto.py --configs c16p32w2v4u,c16p32w2v4p,c16p32w2v4up,c32p32w2v8p,c32p32w2v8 --splits 1,2 \
  --corpus tests/data/wgrad_shapes.csv --corpus $S/dw48_random_2026120703.csv --out /tmp/o/dw_vert.json > /tmp/o/dw_vert.log 2>&1
echo "dw_vert rc=$? $(( $(date +%s) - t0 )) s"; cut -c1-200 /tmp/o/dw_vert.log | tail -9
tar -C /tmp/o -cJf $OUT/g1.tar.xz .
