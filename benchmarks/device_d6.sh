#!/usr/bin/env bash
# H200, session 25: C1's per-layer measurement again after this session's changes (the depthwise window epilogue
# and the TMA depthwise family for 3x3 only, b330904; the window split rule's costs, 95d642c; cost model 13,
# d40c194): every weight-gradient problem of ResNet-50, MobileNetV2, ConvNeXt-T and EfficientNet-B0 (batch 32,
# 224 px, bf16 autocast: benchmarks/shapes/model_*_2026-12-04.csv, C1's record) through
# run-from-cache --verify --bench --baseline cudnn: auto's pick per layer against cuDNN, as C1 ran it.
# Carried: .whl, .device/d3.tar.xz (the default sm_90 cache of b330904).
set -uo pipefail
source benchmarks/device_setup.sh .device/d3.tar.xz
mkdir -p /tmp/o
for m in efficientnet_b0 mobilenet_v2 convnext_tiny resnet50; do
  left=$(( 400 - ($(date +%s) - t0) )); [ $left -gt 20 ] || break
  timeout $left python3 -m skwgrad run-from-cache --cache /tmp/pc --corpus benchmarks/shapes/model_${m}_2026-12-04.csv --verify --bench \
    --baseline cudnn --iters 30 --out /tmp/o/layers_d6_$m.json > /tmp/o/layers_d6_$m.log 2>&1; echo "$m layers rc=$? $(( $(date +%s) - t0 )) s"
  tail -2 /tmp/o/layers_d6_$m.log | cut -c1-300
done
tar -C /tmp/o -cJf $OUT/d6.tar.xz .
