#!/usr/bin/env bash
# H200, session 27. (1) The depthwise row-walk prototype (benchmarks/dw_vert_proto.py, Triton JIT here):
# 3x3 and 5x5 depthwise at stride and dilation 1, seven configurations at three split degrees, each checked
# against float64, against auto (the default cache) and cuDNN, all timed as CUDA graphs of 20 calls; sets:
# dw3_random_2026120603 (drawn before the run), the models' depthwise layers, dw_random_2026120551, the corpus.
# (2) Issues 10 and 12 on the corpus, as Z2 ran it: gpu_tma_auto.py --top 6 --top-old 3, host included.
# Carried: .whl, .device/f0.tar.xz (the default sm_90 cache of e263171's source).
set -uo pipefail
source benchmarks/device_setup.sh .device/f0.tar.xz
S=benchmarks/shapes; mkdir -p /tmp/o
timeout 320 python3 benchmarks/dw_vert_proto.py --corpus $S/dw3_random_2026120603.csv --corpus $S/dw_models_2026-12-04.csv \
  --corpus $S/dw_random_2026120551.csv --corpus tests/data/wgrad_shapes.csv --out /tmp/o/dw_vert.json > /tmp/o/dw_vert.log 2>&1
echo "dw_vert rc=$? $(( $(date +%s) - t0 )) s"; tail -1 /tmp/o/dw_vert.log | cut -c1-1500
left=$(( 560 - ($(date +%s) - t0) ))
timeout $left python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --top 6 --top-old 3 --corpus tests/data/wgrad_shapes.csv \
  --out /tmp/o/tma_auto_corpus.json > /tmp/o/tma_auto_corpus.log 2>&1
echo "corpus rc=$? $(( $(date +%s) - t0 )) s"; tail -1 /tmp/o/tma_auto_corpus.log | cut -c1-900
tar -C /tmp/o -cJf $OUT/f2.tar.xz .
