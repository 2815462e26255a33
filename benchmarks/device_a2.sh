#!/usr/bin/env bash
# H200, session 22 (issue 10): cost model 12 (main_iter_tma_shared_plane: co-resident TMA CTAs on output
# planes of 100x100 or more) against auto_prev (the same model with that constant 0: model 11 and the
# fill ceiling), on three sets of large-plane layers drawn and committed before this run:
# random_hires_2026120409 (dense), random_g_hires_2026120410 (grouped), random_3d_hires_2026120411 (3-D).
# gpu_tma_auto.py: auto, auto_prev, the model's 6 best TMA and 3 best other launches, cuDNN; every launch
# verified; the user's call end to end.
# Build (CPU): cp -r .device/a1cache .device/a2cache; skwgrad compile-all --preset default --arch sm_90
#   --corpus each set --cache .device/a2cache; skwgrad cache export --cache .device/a2cache .device/a2.tar.xz.
#   Carried: .whl, .device/a2.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/a2.tar.xz
timeout 540 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --top 6 --top-old 3 --prev-constant main_iter_tma_shared_plane=0 \
  --corpus benchmarks/shapes/random_hires_2026120409.csv --corpus benchmarks/shapes/random_g_hires_2026120410.csv \
  --corpus benchmarks/shapes/random_3d_hires_2026120411.csv --out $OUT/tma_auto_a2.json > $OUT/tma_auto_a2.log 2>&1
echo "tma_auto rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $OUT/tma_auto_a2.log | cut -c1-1200
