#!/usr/bin/env bash
# H200, session 22: the end state (the fill ceiling, cost model 12, the 3-D price 0.02) on three sets drawn
# and committed before this run and never timed: random_2026120420 (dense), random_g_2026120421 (grouped),
# random_3d_2026120422 (3-D). gpu_tma_auto.py: auto, the model's 6 best TMA and 3 best other launches,
# cuDNN; every launch verified; the user's call end to end.
# Build (CPU): cp -r .device/a8cache .device/a9cache; skwgrad compile-all --preset default --arch sm_90
#   --corpus each set --cache .device/a9cache; skwgrad cache export. Carried: .whl, .device/a9.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/a9.tar.xz
S=benchmarks/shapes
timeout 400 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --top 6 --top-old 3 --corpus $S/random_2026120420.csv \
  --corpus $S/random_g_2026120421.csv --corpus $S/random_3d_2026120422.csv --out $OUT/tma_auto_a9.json > $OUT/tma_auto_a9.log 2>&1
echo "tma_auto rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $OUT/tma_auto_a9.log | cut -c1-1200
