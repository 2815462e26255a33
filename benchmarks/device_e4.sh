#!/usr/bin/env bash
# H200, session 26: C1's per-layer measurement again after the dependent atomic launches (225e0d8): every
# weight-gradient problem of ResNet-50, MobileNetV2, ConvNeXt-T and EfficientNet-B0 (batch 32, 224 px, bf16
# autocast: benchmarks/shapes/model_*_2026-12-04.csv) through run-from-cache --verify --bench --baseline cudnn:
# auto's pick per layer against cuDNN, as C1 and D6 ran it.
# Carried: .whl, .device/e3.tar.xz (the default sm_90 cache of 225e0d8's source).
set -uo pipefail
source benchmarks/device_setup.sh .device/e3.tar.xz
mkdir -p /tmp/o
for m in efficientnet_b0 mobilenet_v2 convnext_tiny resnet50; do
  left=$(( 400 - ($(date +%s) - t0) )); [ $left -gt 20 ] || break
  timeout $left python3 -m skwgrad run-from-cache --cache /tmp/pc --corpus benchmarks/shapes/model_${m}_2026-12-04.csv --verify --bench \
    --baseline cudnn --iters 30 --out /tmp/o/layers_e4_$m.json > /tmp/o/layers_e4_$m.log 2>&1; echo "$m layers rc=$? $(( $(date +%s) - t0 )) s"
  tail -2 /tmp/o/layers_e4_$m.log | cut -c1-300
done
tar -C /tmp/o -cJf $OUT/e4.tar.xz .
