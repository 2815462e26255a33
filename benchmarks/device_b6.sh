#!/usr/bin/env bash
# H200, session 23 (issue 11): stride-2 depthwise window kernels by channel block and channels a thread. The
# shipped ones take 16 channels x 32 strips (4 channels a thread: 3.9 SASS instructions a product for 3x3, 3.6
# for 5x5); trials: 32 x 16 (same per thread, wider block), 32 x 32 and 16 x 64 (8 a thread: 3.2 for 3x3, 2.9
# for 5x5, 2.5 for 7x7). On random_dw_s2_2026120432 (stride 2, drawn before this run) and random_dw_2026120427's
# stride-2 rows. gpu_dw_configs_ab.py: every launch verified three times against float64, dW and workspace
# poisoned, each configuration at the rule's degree, twice and half it. Build (CPU): compile-all --corpus into a
# copy of b5cache; build_dw_configs.py with the --config list; skwgrad cache export. Carried: .whl, .device/b6.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/b6.tar.xz
S=benchmarks/shapes
timeout 500 python3 benchmarks/gpu_dw_configs_ab.py --cache /tmp/pc --corpus $S/random_dw_s2_2026120432.csv --corpus $S/random_dw_2026120427.csv \
  --config 3:win7r3s2:32x16x4 --config 3:win7r3s2:32x32x4 --config 3:win7r3s2:16x64x4 --config 5:win7s2:32x32x4 --config 5:win7s2:32x16x4 --config 7:win7s2:32x32x4 --config 7:win7s2:32x16x4 --commit "${X_COMMIT:-}" --budget-s 440 --out $OUT/dw_configs_b6.json 2>&1 | cut -c1-420 | tail -12
echo "ab rc=$? $(( $(date +%s) - t0 )) s"
