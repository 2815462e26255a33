#!/usr/bin/env bash
# H200, session 27: larger pointwise tiles (issue 12). The default sm_90 cache of e263171's source plus
# pointwise Triton kernels of six tiles the sweep does not build (benchmarks/build_pw_configs.py: 256x64,
# 64x256, 128x256, 256x128 at 8 warps, 32x256 and 256x32 at 4; split-K direct / atomic / workspace and
# dp_sk stream-K workspace), timed as trials beside auto, the model's 2 best TMA and 3 best other launches
# (gpu_tma_auto.py --extra), every launch verified against float64 with dW and the workspace poisoned.
# Sets: the corpus's 1x1 rows, the models' distinct 1x1 stride-1 layers, and two pointwise sets drawn
# before the run (pw_random_2026120601, pw_small_2026120602).
# Carried: .whl, .device/f1.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/f1.tar.xz
S=benchmarks/shapes; mkdir -p /tmp/o
X="--extra 256x64x64 --extra 64x256x64 --extra 128x256x64 --extra 256x128x64 --extra 32x256x64 --extra 256x32x64 --extra-n 3"
timeout 250 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --top 2 --top-old 3 --no-end-to-end $X \
  --corpus $S/pw_corpus_1x1.csv --corpus $S/pw_models_2026-12-04.csv --out /tmp/o/pw_tiles_models.json > /tmp/o/pw_tiles_models.log 2>&1
echo "models rc=$? $(( $(date +%s) - t0 )) s"; tail -1 /tmp/o/pw_tiles_models.log | cut -c1-900
timeout 250 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --top 2 --top-old 3 --no-end-to-end $X \
  --corpus $S/pw_random_2026120601.csv --corpus $S/pw_small_2026120602.csv --out /tmp/o/pw_tiles_random.json > /tmp/o/pw_tiles_random.log 2>&1
echo "random rc=$? $(( $(date +%s) - t0 )) s"; tail -1 /tmp/o/pw_tiles_random.log | cut -c1-900
tar -C /tmp/o -cJf $OUT/f1.tar.xz .
