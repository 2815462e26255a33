#!/usr/bin/env bash
# H200, session 27. (1) The corpus through run-from-cache --verify --bench against cuDNN (every row: the fp32
# few-tiles row and the depthwise rows gpu_tma_auto.py leaves out). (2) The depthwise row-walk prototype
# again, its three best configurations of F2 at 1 and 2 CTAs per CU (F2 found fewer splits faster), on the
# sets F2 did not reach: the models' depthwise layers, dw_random_2026120551 and dw_random_2026120557, the corpus.
# Carried: .whl, .device/f0.tar.xz (the default sm_90 cache of e263171's source).
set -uo pipefail
source benchmarks/device_setup.sh .device/f0.tar.xz
S=benchmarks/shapes; mkdir -p /tmp/o
timeout 150 python3 -m skwgrad run-from-cache --cache /tmp/pc --corpus tests/data/wgrad_shapes.csv --verify --bench --baseline cudnn \
  --iters 30 --out /tmp/o/corpus_rfc.json > /tmp/o/corpus_rfc.log 2>&1
echo "corpus rc=$? $(( $(date +%s) - t0 )) s"; tail -2 /tmp/o/corpus_rfc.log | cut -c1-400
left=$(( 540 - ($(date +%s) - t0) ))
timeout $left python3 benchmarks/dw_vert_proto.py --configs c16p32w2v4u,c16p32w4v4,c16p32w7v4 --splits 1,2 \
  --corpus tests/data/wgrad_shapes.csv --corpus $S/dw_models_2026-12-04.csv --corpus $S/dw_random_2026120551.csv \
  --corpus $S/dw_random_2026120557.csv --out /tmp/o/dw_vert2.json > /tmp/o/dw_vert2.log 2>&1
echo "dw_vert rc=$? $(( $(date +%s) - t0 )) s"; tail -1 /tmp/o/dw_vert2.log | cut -c1-1500
tar -C /tmp/o -cJf $OUT/f3.tar.xz .
