#!/usr/bin/env bash
# H200, session 19 (issue 11): what a user gets from dwconv_tma, host included: gpu_dwconv_tma_ab.py
# with --end-to-end on dw_wide_2026120493 (skwgrad.wgrad on the same tensors and alternating between
# two pairs, so the tensor maps are re-pointed each call; the op; PyTorch's own weight gradient).
# Carried: .whl, .device/x7.tar.xz (device_x7.sh's build; no kernel source changed since).
set -uo pipefail
source benchmarks/device_setup.sh .device/x7.tar.xz
timeout 230 python3 benchmarks/gpu_dwconv_tma_ab.py --cache /tmp/pc --corpus benchmarks/shapes/dw_wide_2026120493.csv \
  --commit "${X_COMMIT:-}" --budget-s 170 --end-to-end --out $OUT/dwconv_tma_e2e_93.json 2>&1 | cut -c1-230 | tail -6
