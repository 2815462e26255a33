#!/usr/bin/env bash
# H200, session 21 (issue 12): cost model 11 (the 3-D TMA loop's price per CU-iteration, fitted on Z1)
# judged on random_3d_2026120402 (drawn after Z1, committed before this run), then Z1's set and the
# corpus's 3-D rows again (in the fit); and the corpus's dense rows best-of (issue 12's floors: auto,
# the model's 6 best TMA launches and 3 best of the other families, cuDNN), every launch verified.
# Build (CPU): skwgrad compile-all --preset default --arch sm_90 --corpus benchmarks/shapes/random_3d_2026120402.csv
#   --corpus benchmarks/shapes/random_3d_2026120401.csv --corpus tests/data/wgrad_shapes.csv --cache .device/z1cache;
#   skwgrad cache export --cache .device/z1cache .device/z2.tar.xz. Carried: .whl, .device/z2.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/z2.tar.xz
timeout 280 python3 benchmarks/gpu_tma_3d_ab.py --cache /tmp/pc --commit "${X_COMMIT:-}" --budget-s 230 --end-to-end \
  --corpus benchmarks/shapes/random_3d_2026120402.csv --corpus benchmarks/shapes/random_3d_2026120401.csv \
  --corpus tests/data/wgrad_shapes.csv --out $OUT/tma_3d_z2.json 2>&1 | cut -c1-160 | tail -40
echo "ab rc=$? $(( $(date +%s) - t0 )) s"
timeout 250 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --top 6 --top-old 3 --no-end-to-end --corpus tests/data/wgrad_shapes.csv \
  --out $OUT/tma_auto_corpus_z2.json > $OUT/tma_auto_corpus_z2.log 2>&1
echo "tma_auto corpus rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $OUT/tma_auto_corpus_z2.log | cut -c1-900
