#!/usr/bin/env bash
# H200, session 24: C1 found the patched EfficientNet-B0 step at 0.53x native (29.0 against 15.4 ms) although
# its layers' auto picks sum to 1.10x cuDNN's device time, and its gradient check off by 1.99 (C1 left
# torchvision's StochasticDepth on: two random draws; now set to 0). (1) gpu_model_hostcost.py: host and step
# time per step of native, patched and patched-off models, and a cProfile of patched steps per conv layer.
# (2) gpu_torch_model.py, eager only, on EfficientNet-B0 and ConvNeXt-T: the gradient checks again.
# Carried: .whl, .device/d.tar.xz (C1's cache). Everything comes back in one tarball (at most 8 files).
set -uo pipefail
source benchmarks/device_setup.sh .device/d.tar.xz
mkdir -p /tmp/o
timeout 300 python3 benchmarks/gpu_model_hostcost.py --models efficientnet_b0,mobilenet_v2,convnext_tiny,resnet50 \
  --commit "${X_COMMIT:-}" --out /tmp/o/model_hostcost_c2.json 2>&1 | cut -c1-200
echo "hostcost rc=$? $(( $(date +%s) - t0 )) s"
timeout 200 python3 benchmarks/gpu_torch_model.py --out /tmp/o/torch_model_c2.json --cache /tmp/pc \
  --models efficientnet_b0,convnext_tiny --no-compile --no-tune --budget-s 180 2>&1 | grep -v "^env:" | grep -i "grad\|backward\|==" | cut -c1-300
echo "models rc=$? $(( $(date +%s) - t0 )) s"
tar -C /tmp/o -cJf $OUT/c2.tar.xz .
