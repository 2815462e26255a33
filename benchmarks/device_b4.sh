#!/usr/bin/env bash
# H200, session 23 (issue 11): 7x7 stride-1 window kernels by channel block. The shipped 7x7 kernel takes 32
# channels a CTA whatever the layer, so 16-56 channel layers run 14-100% masked lanes (B3's weakest row, 48 ch
# 55 px, 0.81x cuDNN). Trials: 16 channels at 64 strips (8 a thread, as shipped) and at 32 (4 a thread, the old
# default), 8 channels, and two tap rows a CTA at 32 and 16 channels (B1: 1.04x at 32). On random_dw7l_2026120429
# (7x7, 16-160 channels, drawn before this run), B1's 7x7 set and the corpus. gpu_dw_configs_ab.py: every launch
# verified three times against float64, dW and workspace poisoned. Build (CPU): compile-all --corpus into a copy of
# b3cache; build_dw_configs.py with the --config list; skwgrad cache export. Carried: .whl, .device/b4.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/b4.tar.xz
S=benchmarks/shapes
timeout 500 python3 benchmarks/gpu_dw_configs_ab.py --cache /tmp/pc --corpus $S/random_dw7l_2026120429.csv --corpus $S/random_dw7_2026120424.csv \
  --corpus tests/data/wgrad_shapes.csv --config 7:win7:16x64x4 --config 7:win7:16x32x4 --config 7:win7r2:32x32x4 --config 7:win7r2:16x64x4 \
  --config 7:win7:8x64x4 --commit "${X_COMMIT:-}" --budget-s 440 --out $OUT/dw_configs_b4.json 2>&1 | cut -c1-420 | tail -40
echo "ab rc=$? $(( $(date +%s) - t0 )) s"
