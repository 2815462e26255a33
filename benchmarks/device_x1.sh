#!/usr/bin/env bash
# H200, for the session after 18 (issue 11): judge the depthwise strip-width rule (2dcae28) on
# random_dw_2026120487, drawn after it: its 3x3 stride-1 rows (113 and 57 px take win5r3, the
# others win7r3) timed with both strips (gpu_dw_window_ab.py), and the whole set through
# run-from-cache (every dtype, verified, cuDNN beside) for issue 11's status; and cost model 10
# (issue 10) on random_2026120488 (dense, drawn after it) through gpu_tma_auto.py.
# Build first (CPU): skwgrad compile-all --preset default --arch sm_90 --corpus
#   benchmarks/shapes/random_dw_2026120487.csv --corpus benchmarks/shapes/random_2026120488.csv
#   --cache .device/x1cache; python benchmarks/build_strip_twins.py --cache .device/x1cache --corpus
#   benchmarks/shapes/random_dw_2026120487.csv --modes win7r3,win5r3; skwgrad cache export --cache
#   .device/x1cache .device/x1.tar.xz. Carried: .whl, .device/x1.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/x1.tar.xz
c=benchmarks/shapes/random_dw_2026120487.csv
timeout 150 python3 benchmarks/gpu_dw_window_ab.py --cache /tmp/pc --corpus $c --modes win7r3,win5r3 --commit "${X1_COMMIT:-}" \
  --only 3x3s1_ --budget-s 120 --out $OUT/dw_window_ab_87.json 2>&1 | cut -c1-220 | tail -12
timeout 120 python3 -m skwgrad run-from-cache --cache /tmp/pc --corpus $c --verify --bench --baseline cudnn --iters 30 \
  --out $OUT/auto_dw87.json > $OUT/auto_dw87.log 2>&1; echo "auto dw87 rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $OUT/auto_dw87.log
timeout 240 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --top 6 --top-old 3 --corpus benchmarks/shapes/random_2026120488.csv \
  --out $OUT/tma_auto_88.json > $OUT/tma_auto_88.log 2>&1
echo "tma_auto 88 rc=$? $(( $(date +%s) - t0 )) s"; cut -c1-200 $OUT/tma_auto_88.log | tail -3
