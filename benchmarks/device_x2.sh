#!/usr/bin/env bash
# H200, session 19 (issue 11): the TMA row-box depthwise prototype (benchmarks/dw_tma_proto.py)
# against cuDNN and the product's auto pick on the stride-1 3x3 / 5x5 16-bit depthwise rows of W2
# (ab_fused_dw_w2) and of random_dw_2026120487 (drawn before the prototype); then device_x1.sh's
# first two parts (the strip rule on random_dw_2026120487, and its run-from-cache status).
# Build first (CPU): device_x1.sh's build plus --corpus benchmarks/shapes/ab_fused_dw_w2.csv, and
#   .venv/bin/python benchmarks/dw_tma_proto.py build --out .device/dwtma
# Carried: .whl, .device/x1.tar.xz, .device/dwtma.
set -uo pipefail
source benchmarks/device_setup.sh .device/x1.tar.xz
c=benchmarks/shapes/random_dw_2026120487.csv
timeout 270 python3 benchmarks/dw_tma_proto.py run --objs .device/dwtma --cache /tmp/pc --commit "${X_COMMIT:-}" \
  --corpus benchmarks/shapes/ab_fused_dw_w2.csv --corpus $c --budget-s 230 --out $OUT/dwtma_x2.json 2>&1 | cut -c1-260 | tail -45
echo "proto rc=$? $(( $(date +%s) - t0 )) s"
[ "${X_PROTO_ONLY:-}" = 1 ] && exit 0
timeout 130 python3 benchmarks/gpu_dw_window_ab.py --cache /tmp/pc --corpus $c --modes win7r3,win5r3 --commit "${X_COMMIT:-}" \
  --only 3x3s1_ --budget-s 100 --out $OUT/dw_window_ab_87.json 2>&1 | cut -c1-220 | tail -10
timeout 110 python3 -m skwgrad run-from-cache --cache /tmp/pc --corpus $c --verify --bench --baseline cudnn --iters 30 \
  --out $OUT/auto_dw87.json > $OUT/auto_dw87.log 2>&1; echo "auto dw87 rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $OUT/auto_dw87.log
