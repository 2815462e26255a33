#!/usr/bin/env bash
# H200, session 19 (issue 10): cost model 10 on random_2026120488 (dense, drawn after it) through
# gpu_tma_auto.py (auto, auto without TMA and the model's top TMA launches, interleaved, cuDNN beside).
# Build: device_x1.sh's (the x1 cache holds the set's kernels). Carried: .whl, .device/x1.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/x1.tar.xz
timeout 420 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --top 6 --top-old 3 --corpus benchmarks/shapes/random_2026120488.csv \
  --out $OUT/tma_auto_88.json > $OUT/tma_auto_88.log 2>&1
echo "tma_auto 88 rc=$? $(( $(date +%s) - t0 )) s"; cut -c1-200 $OUT/tma_auto_88.log | tail -30
