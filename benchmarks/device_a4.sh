#!/usr/bin/env bash
# H200, session 22 (issue 10): cost model 12 as revised (main_iter_tma_partial_box: co-resident TMA CTAs
# priced by the share of their boxes partly past the channels, in place of the large-plane term A3
# disowned) against auto_prev (the constant 0: model 11 with the fill ceiling), on four sets drawn and
# committed before this run: random_2026120412 (dense), random_g_2026120413 (grouped),
# random_3d_2026120414 (3-D), random_fewch_2026120415 (dense, at most 96 channels, planes up to 56x56:
# where the plane term said nothing); and on A2's three large-plane sets (in the fit since A2).
# gpu_tma_auto.py: auto, auto_prev, the model's 6 best TMA and 3 best other launches, cuDNN; every launch
# verified; the user's call end to end.
# Build (CPU): cp -r .device/a2cache .device/a4cache; skwgrad compile-all --preset default --arch sm_90
#   --corpus each new set --cache .device/a4cache; skwgrad cache export --cache .device/a4cache .device/a4.tar.xz.
#   Carried: .whl, .device/a4.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/a4.tar.xz
S=benchmarks/shapes
timeout 560 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --top 6 --top-old 3 --prev-constant main_iter_tma_partial_box=0 \
  --corpus $S/random_fewch_2026120415.csv --corpus $S/random_2026120412.csv --corpus $S/random_g_2026120413.csv \
  --corpus $S/random_3d_2026120414.csv --corpus $S/random_hires_2026120409.csv --corpus $S/random_g_hires_2026120410.csv \
  --corpus $S/random_3d_hires_2026120411.csv --out $OUT/tma_auto_a4.json > $OUT/tma_auto_a4.log 2>&1
echo "tma_auto rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $OUT/tma_auto_a4.log | cut -c1-1200
