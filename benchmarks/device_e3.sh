#!/usr/bin/env bash
# H200, session 26: the atomic launches as dependent launches after the dW memset (abi.arch.Arch.dependent_launch;
# the kernels wait for it before writing dW). (1) The GPU launcher suite on its own cache of this source, with the
# new test of every family's atomic launch, eager with dW poisoned and captured in a CUDA graph. (2)
# gpu_memset_probe.py: auto's launch per row as shipped (memset + dependent launch), with a plain launch after the
# memset (the launcher before) and without the memset, interleaved, both launches verified; on a dense set drawn
# for this run (random_2026120553), the two depthwise/grouped sets drawn before E1 (dependent launch was not
# designed on them), the models' depthwise layers and ResNet-50's layers.
# Carried: .whl, .device/e3.tar.xz (the default sm_90 cache of this source), .device/suite3.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/e3.tar.xz
rm -rf /tmp/ps; python3 -m skwgrad cache import .device/suite3.tar.xz --cache /tmp/ps | tail -1
S=benchmarks/shapes; mkdir -p /tmp/o
SKWGRAD_CACHE=/tmp/ps timeout 220 python3 -m pytest -q -m gpu tests/test_gpu_launcher.py -p no:cacheprovider > /tmp/o/gpu_suite.log 2>&1
echo "gpu suite rc=$? $(( $(date +%s) - t0 )) s"; grep -E "passed|failed|Error" /tmp/o/gpu_suite.log | tail -6 | cut -c1-300
timeout 300 python3 benchmarks/gpu_memset_probe.py --cache /tmp/pc --corpus $S/random_2026120553.csv --corpus $S/dw_random_2026120551.csv \
  --corpus $S/dw_wide_2026120552.csv --corpus $S/dw_models_2026-12-04.csv --corpus $S/model_resnet50_2026-12-04.csv \
  --commit "${X_COMMIT:-}" --rounds 4 --iters 20 --budget-s 270 --out /tmp/o/dependent_probe.json > /tmp/o/dependent_probe.log 2>&1
echo "probe rc=$? $(( $(date +%s) - t0 )) s"; tail -1 /tmp/o/dependent_probe.log | cut -c1-400
tar -C /tmp/o -cJf $OUT/e3.tar.xz .
