#!/usr/bin/env bash
# H200, session 22 (issues 10, 12): the cost model's TMA fill ceiling (auto against auto_prev, the model
# without it) on random_2026120407 (dense) and random_large_2026120408 (dense layers of 30+ GFLOP), both
# drawn and committed before this run, and on the corpus; 64x256 one-tap TMA kernels on trial (timed
# apart as trial<i>, never auto's or a row's best). gpu_tma_auto.py: auto, the model's 6 best TMA and 3
# best other launches, cuDNN; every launch verified; the user's call end to end on the shipped cache.
# Build (CPU): cp -r .device/z7cache .device/a1cache; skwgrad compile-all --preset default --arch sm_90
#   --corpus each set --cache .device/a1cache; cp -r .device/a1cache .device/a1trial;
#   python benchmarks/build_tma_configs.py --cache .device/a1trial --config 64x256x64t1w4s4 --config 64x256x64t1w4s5;
#   python benchmarks/build_tma_configs.py --cache .device/a1trial --config 64x256x64t1w4s4 --mode persistent;
#   skwgrad cache export each. Carried: .whl, .device/a1.tar.xz, .device/a1t.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/a1.tar.xz
rm -rf /tmp/pt; python3 -m skwgrad cache import .device/a1t.tar.xz --cache /tmp/pt | tail -1
timeout 540 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pt --top 6 --top-old 3 --prev-no-fill-ceiling --extra 64x256x64_t1 \
  --corpus benchmarks/shapes/random_2026120407.csv --corpus benchmarks/shapes/random_large_2026120408.csv \
  --corpus tests/data/wgrad_shapes.csv --out $OUT/tma_auto_a1.json > $OUT/tma_auto_a1.log 2>&1
echo "tma_auto rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $OUT/tma_auto_a1.log | cut -c1-1200
