#!/usr/bin/env bash
# H200, session 23 (issue 11): the session's depthwise end state through auto (the second channel blocks: 3x3
# strips of 7 at 32 channels, 7x7 at 16, 5x5/7x7 stride 2 at 32, picked by padding and tiles) against auto
# without them (the session's start), same process, on random_dw_s2_2026120433 and random_dw_2026120434 (drawn
# after B6, before this run) and the corpus. gpu_dw_configs_ab.py: every launch verified three times against
# float64, dW and workspace poisoned. Build (CPU): compile-all --corpus each set into a copy of a9cache; skwgrad
# cache export. Carried: .whl, .device/b7.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/b7.tar.xz
S=benchmarks/shapes
timeout 500 python3 benchmarks/gpu_dw_configs_ab.py --cache /tmp/pc --corpus $S/random_dw_s2_2026120433.csv --corpus $S/random_dw_2026120434.csv \
  --corpus tests/data/wgrad_shapes.csv --rounds 5 --commit "${X_COMMIT:-}" --budget-s 440 --out $OUT/dw_auto_b7.json 2>&1 | cut -c1-300 | tail -60
echo "ab rc=$? $(( $(date +%s) - t0 )) s"
