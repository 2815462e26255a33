#!/usr/bin/env bash
# H200, session 19 (issue 11): the window split that fills the SMs and the strip ranking by window
# loads, judged on random_dw_2026120491 (drawn before both changes): every window row's kernel at
# the new rule's degree against the rule before it (<mode>_ksold) and both strips
# (gpu_dw_window_ab.py); then the whole set through run-from-cache (verified, cuDNN beside).
# Build first (CPU): skwgrad compile-all --preset default --arch sm_90 --corpus
#   benchmarks/shapes/random_dw_2026120491.csv --cache .device/x4cache; skwgrad cache export --cache
#   .device/x4cache .device/x4.tar.xz. Carried: .whl, .device/x4.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/x4.tar.xz
c=benchmarks/shapes/random_dw_2026120491.csv
timeout 300 python3 benchmarks/gpu_dw_window_ab.py --cache /tmp/pc --corpus $c --modes win7r3,win5r3 --commit "${X_COMMIT:-}" \
  --budget-s 270 --out $OUT/dw_window_ab_91.json 2>&1 | cut -c1-240 | tail -30
echo "window ab rc=$? $(( $(date +%s) - t0 )) s"
timeout 170 python3 -m skwgrad run-from-cache --cache /tmp/pc --corpus $c --verify --bench --baseline cudnn --iters 30 \
  --out $OUT/auto_dw91.json > $OUT/auto_dw91.log 2>&1; echo "auto dw91 rc=$? $(( $(date +%s) - t0 )) s"; tail -34 $OUT/auto_dw91.log | cut -c1-60,150-230
