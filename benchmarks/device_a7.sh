#!/usr/bin/env bash
# H200, session 22 (issue 11): 7x7 TMA depthwise kernels (dwconv_tma, trial in the default: 32 channels x 16
# columns, 2 output rows a step) against the window kernels auto took before them, on random_dw7w_2026120418
# (7x7 stride 1, 256+ channels: where the rule takes the family), random_dw7_2026120417 (7x7, 128+ channels:
# below 256 the family is timed beside the window kernel) and the corpus's ConvNeXt row, all drawn before
# this run. gpu_dwconv_tma_ab.py: every launch verified three times against float64, dW and workspace poisoned.
# Build (CPU): skwgrad compile-all --preset default --arch sm_90 --corpus each set --cache .device/a7cache;
#   skwgrad cache export. Carried: .whl, .device/a7.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/a7.tar.xz
S=benchmarks/shapes
timeout 420 python3 benchmarks/gpu_dwconv_tma_ab.py --cache /tmp/pc --corpus $S/random_dw7w_2026120418.csv --corpus $S/random_dw7_2026120417.csv \
  --corpus tests/data/wgrad_shapes.csv --commit "${X_COMMIT:-}" --budget-s 380 --out $OUT/dwconv_tma_ab_a7.json 2>&1 | cut -c1-230 | tail -30
echo "ab rc=$? $(( $(date +%s) - t0 )) s"
