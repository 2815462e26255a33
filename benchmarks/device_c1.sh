#!/usr/bin/env bash
# H200, session 24: where a PyTorch user stands on whole models, host included (first whole-model run since
# session 5's E7). (1) gpu_torch_model.py: ResNet-50, MobileNetV2, ConvNeXt-T, EfficientNet-B0 and
# ResNeXt-50 32x4d (torchvision, random init, batch 32, 224 px, channels last, bf16 autocast): gradients
# against PyTorch's, backward time native / patched auto / patched with skwgrad off, and ResNet-50 under
# torch.compile(reduce-overhead). (2) Every weight-gradient problem of those models (the shape CSVs (1)
# records) through run-from-cache --verify --bench --baseline cudnn: auto's pick per layer against cuDNN.
# Build (CPU): skwgrad compile-all --preset default --arch sm_90 --cache .device/dcache; skwgrad cache export
#   .device/d.tar.xz --cache .device/dcache --arch sm_90. Carried: .whl, .device/d.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/d.tar.xz
timeout 330 python3 benchmarks/gpu_torch_model.py --out $OUT/torch_model_c1.json --cache /tmp/pc \
  --models resnet50,mobilenet_v2,convnext_tiny,efficientnet_b0,resnext50_32x4d --compile-models resnet50 \
  --no-control --no-tune --budget-s 300 2>&1 | grep -v "^env:" | cut -c1-400 | tail -80
echo "models rc=$? $(( $(date +%s) - t0 )) s"
for m in resnet50 mobilenet_v2 convnext_tiny efficientnet_b0 resnext50_32x4d; do
  c=$OUT/torch_model_c1_${m}_shapes.csv; [ -f $c ] || continue
  left=$(( 560 - ($(date +%s) - t0) )); [ $left -gt 20 ] || break
  timeout $left python3 -m skwgrad run-from-cache --cache /tmp/pc --corpus $c --verify --bench --baseline cudnn --iters 30 \
    --out $OUT/layers_c1_$m.json > $OUT/layers_c1_$m.log 2>&1; echo "$m layers rc=$? $(( $(date +%s) - t0 )) s"
  tail -4 $OUT/layers_c1_$m.log | cut -c1-300
done
