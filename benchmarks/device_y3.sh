#!/usr/bin/env bash
# H200, session 20 (issues 12, 11, 10): the two-CTA default (927ac9e: the 4-warp TMA tiles up to
# 64x128 at max_regs 128) on sets drawn after run Y2: auto against `before` (auto with the two-CTA
# kernels left out, their one-CTA builds in the cache: what auto ran before), cuDNN beside, every
# launch verified 3x (gpu_tma_regs_ab.py --before-only); and the GPU suite's TMA cases.
# Rows: random_g_2026120497 (16 grouped), random_2026120496 (24 dense), drawn at 50ecf67; then the corpus
# (tests/data/wgrad_shapes.csv) while the budget lasts.
# Build (CPU): skwgrad compile-all --preset default --arch sm_90 --corpus <each csv> --cache .device/y3cache;
#   python benchmarks/build_tma_regs_twins.py --cache .device/y3cache; python tests/test_gpu_launcher.py
#   build-cache .device/y3cache; skwgrad cache export --cache .device/y3cache .device/y3.tar.xz.
#   Carried: .whl, .device/y3.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/y3.tar.xz
timeout 400 python3 benchmarks/gpu_tma_regs_ab.py --cache /tmp/pc --commit "${X_COMMIT:-}" --budget-s 340 --before-only \
  --corpus benchmarks/shapes/random_g_2026120497.csv --corpus benchmarks/shapes/random_2026120496.csv \
  --corpus tests/data/wgrad_shapes.csv \
  --out $OUT/tma_regs_default_y3.json 2>&1 | cut -c1-230 | tail -70
echo "ab rc=$? $(( $(date +%s) - t0 )) s"
SKWGRAD_CACHE=/tmp/pc timeout 150 python3 -m pytest -q -m gpu tests/test_gpu_launcher.py -k tma -p no:cacheprovider > $OUT/gpu_tma.log 2>&1
echo "gpu suite rc=$? $(( $(date +%s) - t0 )) s"; tail -4 $OUT/gpu_tma.log | cut -c1-300
