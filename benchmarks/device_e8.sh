#!/usr/bin/env bash
# H200, session 26: Stage-2 as a dependent launch after the main kernel (bf5a507), on top of E3's dependent atomic
# launches. (1) The GPU launcher suite on its own cache of this source. (2) gpu_memset_probe.py: auto's launch as
# shipped against plain launches (the launcher before this session), interleaved, both verified, on a set drawn for
# this run with dW in the input dtype (random_dw16_2026120556: random_shapes.py seed 2026120556, 16-bit weights,
# where the split launches end in Stage-2) and the corpus (wgrad_shapes.csv).
# Carried: .whl, .device/e8.tar.xz (the default sm_90 cache of this source), .device/suite4.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/e8.tar.xz
rm -rf /tmp/ps; python3 -m skwgrad cache import .device/suite4.tar.xz --cache /tmp/ps | tail -1
S=benchmarks/shapes; mkdir -p /tmp/o
SKWGRAD_CACHE=/tmp/ps timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_launcher.py -p no:cacheprovider > /tmp/o/gpu_suite.log 2>&1
echo "gpu suite rc=$? $(( $(date +%s) - t0 )) s"; grep -E "passed|failed|Error" /tmp/o/gpu_suite.log | tail -6 | cut -c1-300
timeout 260 python3 benchmarks/gpu_memset_probe.py --cache /tmp/pc --corpus $S/random_dw16_2026120556.csv --corpus tests/data/wgrad_shapes.csv \
  --commit "${X_COMMIT:-}" --rounds 4 --iters 20 --budget-s 230 --out /tmp/o/stage2_probe.json > /tmp/o/stage2_probe.log 2>&1
echo "probe rc=$? $(( $(date +%s) - t0 )) s"; tail -1 /tmp/o/stage2_probe.log | cut -c1-500
tar -C /tmp/o -cJf $OUT/e8.tar.xz .
