#!/usr/bin/env bash
# H200, session 21: the end state (57b544a's kernels, cost model 11) on three sets drawn before this run
# and never timed: random_2026120403 (dense), random_g_2026120404 (grouped), random_3d_2026120405 (3-D).
# gpu_tma_auto.py: auto, the model's 6 best TMA launches and 3 best of the other families, cuDNN; every
# launch verified; the user's call end to end (skwgrad.wgrad, the op, PyTorch's call).
# Build (CPU): skwgrad compile-all --preset default --arch sm_90 --corpus each set --cache .device/z7cache;
#   skwgrad cache export --cache .device/z7cache .device/z7.tar.xz. Carried: .whl, .device/z7.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/z7.tar.xz
timeout 480 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --top 6 --top-old 3 --corpus benchmarks/shapes/random_2026120403.csv \
  --corpus benchmarks/shapes/random_g_2026120404.csv --corpus benchmarks/shapes/random_3d_2026120405.csv \
  --out $OUT/tma_auto_z7.json > $OUT/tma_auto_z7.log 2>&1
echo "tma_auto rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $OUT/tma_auto_z7.log | cut -c1-900
