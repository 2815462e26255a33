#!/usr/bin/env bash
# H200, written in session 28 (no device was lent after run G1: for the next session). Issue 11: the row-walk
# depthwise family (dwconv_walk) as the product builds it, beside the launch auto takes without it
# (gpu_dwconv_walk_ab.py: every launch verified against float64, dW and workspace poisoned; the split rule's
# neighbour too; end to end), on dw_walk_random_2026120704 (10 depthwise 3x3 stride-1 layers of 48+ rows drawn
# after run G1, before the family was built), the corpus, dw3_small_random_2026120705 (6 under 48 rows),
# dw57_random_2026120706 (6 5x5 and 6 7x7 layers) and the models' layers. Decides
# benchmarks/proposals/dwconv_walk_auto.diff (auto takes the 3x3 kernel at 48+ rows), and whether the trial
# 5x5 / 7x7 configurations (benchmarks/build_walk_configs.py: 7:32x4x1:v1, 5:32x4x2:v1, 5:32x8x1:v2) beat auto, and
# (added in session 29) whether the 3x3 kernel at 2 channels a thread (3:16x16x2:v2: 94 registers, 5 CTAs an SM against
# the shipped 152 and 3) runs the latency-bound layers faster.
# Carried: .whl, .device/g0t.tar.xz: the default sm_90 cache of 58eb976's kernel source plus those trials for the
# corpus, the models' and dw57 rows, and 3:16x16x2:v2 for the 3x3 rows of every corpus here (if a key file changed
# since: compile-all --preset default --arch sm_90, then build_walk_configs.py with those configurations and
# corpora, then cache export).
set -uo pipefail
source benchmarks/device_setup.sh .device/g0t.tar.xz
S=benchmarks/shapes; mkdir -p /tmp/o
timeout 540 python3 benchmarks/gpu_dwconv_walk_ab.py --cache /tmp/pc --end-to-end --budget-s 460 \
  --corpus $S/dw_walk_random_2026120704.csv --corpus tests/data/wgrad_shapes.csv --corpus $S/dw57_random_2026120706.csv \
  --corpus $S/dw3_small_random_2026120705.csv --corpus $S/dw_models_2026-12-04.csv --out /tmp/o/walk_ab.json > /tmp/o/walk_ab.log 2>&1
echo "walk rc=$? $(( $(date +%s) - t0 )) s"; cut -c1-230 /tmp/o/walk_ab.log | tail -60
tar -C /tmp/o -cJf $OUT/g2.tar.xz .
