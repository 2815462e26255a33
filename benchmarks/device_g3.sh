#!/usr/bin/env bash
# H200, written in session 28 (for the next session). Issues 10 and 12: the corpus as F2 ran it (gpu_tma_auto
# --top 6 --top-old 3, every launch verified, host included) with cost model 15 (F2 ran model 13), and the
# corpus through run-from-cache (--verify --bench against cuDNN: the fp32 IEEE and depthwise rows gpu_tma_auto
# leaves out). Carried: .whl, .device/g0.tar.xz (the default sm_90 cache of 58eb976's kernel source).
set -uo pipefail
source benchmarks/device_setup.sh .device/g0.tar.xz
mkdir -p /tmp/o
timeout 330 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --top 6 --top-old 3 --corpus tests/data/wgrad_shapes.csv \
  --out /tmp/o/corpus.json > /tmp/o/corpus.log 2>&1
echo "corpus rc=$? $(( $(date +%s) - t0 )) s"; tail -1 /tmp/o/corpus.log | cut -c1-900
left=$(( 560 - ($(date +%s) - t0) ))
timeout $left python3 -m skwgrad run-from-cache --cache /tmp/pc --corpus tests/data/wgrad_shapes.csv --verify --bench --baseline cudnn \
  --iters 30 --out /tmp/o/corpus_rfc.json > /tmp/o/corpus_rfc.log 2>&1
echo "rfc rc=$? $(( $(date +%s) - t0 )) s"; tail -3 /tmp/o/corpus_rfc.log | cut -c1-400
tar -C /tmp/o -cJf $OUT/g3.tar.xz .
