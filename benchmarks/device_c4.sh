#!/usr/bin/env bash
# H200, session 24: the patched model's host path after the changes C2 pointed at (the C apply of the eager
# autograd function, one resolved launcher call per layer (api.torch_call), counters and decisions without
# per-call rebuilding). (1) The GPU launcher suite on its own cache (a torch_call test is new). (2)
# gpu_model_hostcost.py as in C2. (3) gpu_torch_model.py: gradient checks and backward time, eager, on
# EfficientNet-B0, MobileNetV2 and ResNet-50, and ResNet-50 and MobileNetV2 under
# torch.compile(mode="reduce-overhead") (CUDA graphs: no host cost), skwgrad against native.
# Carried: .whl, .device/d.tar.xz (C1's cache), .device/suite.tar.xz (tests/test_gpu_launcher.py build-cache).
set -uo pipefail
source benchmarks/device_setup.sh .device/suite.tar.xz
mkdir -p /tmp/o
SKWGRAD_CACHE=/tmp/pc timeout 240 python3 -m pytest -q -m gpu tests/test_gpu_launcher.py -p no:cacheprovider > /tmp/o/gpu_suite_c4.log 2>&1
echo "suite rc=$? $(( $(date +%s) - t0 )) s"; tail -3 /tmp/o/gpu_suite_c4.log | cut -c1-300
rm -rf /tmp/pc; python3 -m skwgrad cache import .device/d.tar.xz --cache /tmp/pc | tail -1
timeout 200 python3 benchmarks/gpu_model_hostcost.py --models efficientnet_b0,mobilenet_v2,convnext_tiny,resnet50 \
  --commit "${X_COMMIT:-}" --out /tmp/o/model_hostcost_c4.json 2>&1 | grep -v "^    " | cut -c1-400
echo "hostcost rc=$? $(( $(date +%s) - t0 )) s"
left=$(( 570 - ($(date +%s) - t0) ))
timeout $left python3 benchmarks/gpu_torch_model.py --out /tmp/o/torch_model_c4.json --cache /tmp/pc \
  --models resnet50,mobilenet_v2,efficientnet_b0 --compile-models resnet50,mobilenet_v2 --no-control --no-tune \
  --budget-s $(( left - 15 )) 2>&1 | grep -v "^env:" | grep -i "grads:\|backward\|==\|compiled\|step" | cut -c1-300
echo "models rc=$? $(( $(date +%s) - t0 )) s"
tar -C /tmp/o -cJf $OUT/c4.tar.xz .
