#!/usr/bin/env bash
# H200, written in session 29 (no device was lent: for a later session). Issue 11, two prototypes on the vector
# units, each verified against float64 with dW poisoned and graph-timed beside auto and cuDNN, on sets drawn before
# any GPU run of them:
# (1) grouped layers of 2-4 channels a group (benchmarks/grouped_walk_proto.py, the row walk with a thread owning one
#     or two output channels and its group's input channels as one vector) on grouped_narrow_random_2026120901 (12
#     layers) and the ResNeXt 32x4d / 64x4d first-stage layers: the packed MMA kernels auto takes keep 1/GB of their
#     tile at these widths and ran 1.0-1.4x cuDNN on such rows (runs A4-A9);
# (2) 5x5 / 7x7 depthwise sweeping the columns with one filter row a thread (benchmarks/dw_sweep_proto.py) on
#     dw57_random_2026120706 (drawn in session 28) and the models' layers (ConvNeXt-T's four 7x7, EfficientNet's 5x5).
# Carried: .whl, .device/g0.tar.xz (auto's cache).
set -uo pipefail
source benchmarks/device_setup.sh .device/g0.tar.xz
S=benchmarks/shapes; mkdir -p /tmp/o
timeout 300 python3 benchmarks/grouped_walk_proto.py --configs k32p4w2,k16p8w2,k64p4w2v2,k64p4w4v2 --corpus $S/grouped_narrow_models_2026-12-04.csv \
  --corpus $S/grouped_narrow_random_2026120901.csv --out /tmp/o/grouped_walk.json > /tmp/o/grouped_walk.log 2>&1
echo "grouped_walk rc=$? $(( $(date +%s) - t0 )) s"; cut -c1-220 /tmp/o/grouped_walk.log | tail -18
left=$(( 540 - ($(date +%s) - t0) ))
timeout $left python3 benchmarks/dw_sweep_proto.py --configs c32s16v4,c64s16v8,c16s32v4 --splits 2,4 \
  --corpus $S/dw_models_2026-12-04.csv --corpus tests/data/wgrad_shapes.csv --corpus $S/dw57_random_2026120706.csv \
  --out /tmp/o/dw_sweep.json > /tmp/o/dw_sweep.log 2>&1
echo "dw_sweep rc=$? $(( $(date +%s) - t0 )) s"; cut -c1-220 /tmp/o/dw_sweep.log | tail -20
tar -C /tmp/o -cJf $OUT/g4.tar.xz .
