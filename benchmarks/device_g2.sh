#!/usr/bin/env bash
# H200, written in session 28 (no device was lent for it after run G1: for the next session). (1) Issue 11: the
# row-walk depthwise family (dwconv_walk) as the product builds it, beside the launch auto takes without it
# (gpu_dwconv_walk_ab.py: every launch verified against float64, dW and workspace poisoned; the split rule's
# neighbour too; end to end), on dw_walk_random_2026120704 (10 depthwise 3x3 stride-1 layers of 48+ rows drawn
# after run G1, before the family was built), the corpus, dw3_small_random_2026120705 (6 under 48 rows) and the
# models' layers: whether benchmarks/proposals/dwconv_walk_auto.diff (auto takes it at 48+ rows) holds.
# (2) Issues 10 and 12: the corpus as F2 ran it (gpu_tma_auto --top 6 --top-old 3, host included) with cost
# model 15. Carried: .whl, .device/g0.tar.xz (the default sm_90 cache of 98d92fe's kernel source: rebuild it
# with compile-all --preset default --arch sm_90 and cache export if a key file changed since).
set -uo pipefail
source benchmarks/device_setup.sh .device/g0.tar.xz
S=benchmarks/shapes; mkdir -p /tmp/o
timeout 260 python3 benchmarks/gpu_dwconv_walk_ab.py --cache /tmp/pc --end-to-end --budget-s 220 \
  --corpus $S/dw_walk_random_2026120704.csv --corpus tests/data/wgrad_shapes.csv --corpus $S/dw3_small_random_2026120705.csv \
  --corpus $S/dw_models_2026-12-04.csv --out /tmp/o/walk_ab.json > /tmp/o/walk_ab.log 2>&1
echo "walk rc=$? $(( $(date +%s) - t0 )) s"; cut -c1-230 /tmp/o/walk_ab.log | tail -44
left=$(( 570 - ($(date +%s) - t0) ))
timeout $left python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --top 6 --top-old 3 --corpus tests/data/wgrad_shapes.csv \
  --out /tmp/o/corpus.json > /tmp/o/corpus.log 2>&1
echo "corpus rc=$? $(( $(date +%s) - t0 )) s"; tail -1 /tmp/o/corpus.log | cut -c1-900
tar -C /tmp/o -cJf $OUT/g2.tar.xz .
