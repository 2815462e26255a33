#!/usr/bin/env bash
# H200, written in session 29 (no device was lent: for a later session). Issue 11, grouped layers of 2-4 channels a
# group: the row-walk prototype on the vector units (benchmarks/grouped_walk_proto.py: a thread owns one or two
# output channels of a strip and its group's input channels as one vector; every configuration at three split
# degrees, verified against float64 with dW poisoned, graph-timed) beside auto and cuDNN, on
# grouped_narrow_random_2026120901 (12 layers drawn in session 29, before any GPU run of the prototype) and the
# ResNeXt 32x4d / 64x4d first-stage layers. The packed MMA kernels auto takes keep 1/GB of their tile at these
# widths and ran 1.0-1.4x cuDNN on such rows (runs A4-A9). Carried: .whl, .device/g0.tar.xz (auto's cache).
set -uo pipefail
source benchmarks/device_setup.sh .device/g0.tar.xz
S=benchmarks/shapes; mkdir -p /tmp/o
timeout 420 python3 benchmarks/grouped_walk_proto.py --corpus $S/grouped_narrow_models_2026-12-04.csv \
  --corpus $S/grouped_narrow_random_2026120901.csv --out /tmp/o/grouped_walk.json > /tmp/o/grouped_walk.log 2>&1
echo "grouped_walk rc=$? $(( $(date +%s) - t0 )) s"; cut -c1-220 /tmp/o/grouped_walk.log | tail -20
tar -C /tmp/o -cJf $OUT/g4.tar.xz .
