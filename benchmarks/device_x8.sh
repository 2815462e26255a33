#!/usr/bin/env bash
# H200, session 19 (issue 11): issue 11's status at the session's last commit on random_dw_2026120492
# (40 depthwise and grouped layers, drawn before the dwconv_tma family): run-from-cache (every row
# verified, cuDNN in benchmark mode), then the window split and strip rules judged again
# (gpu_dw_window_ab.py: each window kernel at the rule's degree and at the one before the fill rule).
# Build (CPU): skwgrad compile-all --preset default --arch sm_90 --corpus benchmarks/shapes/random_dw_2026120492.csv
#   --cache .device/x8cache; skwgrad cache export --cache .device/x8cache .device/x8.tar.xz. Carried: .whl, .device/x8.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/x8.tar.xz
c=benchmarks/shapes/random_dw_2026120492.csv
timeout 200 python3 -m skwgrad run-from-cache --cache /tmp/pc --corpus $c --verify --bench --baseline cudnn --iters 30 \
  --out $OUT/auto_dw92.json > $OUT/auto_dw92.log 2>&1; echo "auto dw92 rc=$? $(( $(date +%s) - t0 )) s"; tail -43 $OUT/auto_dw92.log | cut -c1-60,150-230
timeout 200 python3 benchmarks/gpu_dw_window_ab.py --cache /tmp/pc --corpus $c --modes win7r3,win5r3 --commit "${X_COMMIT:-}" \
  --budget-s 170 --out $OUT/dw_window_ab_92.json 2>&1 | cut -c1-240 | tail -4
