#!/usr/bin/env bash
# H200, session 23 (issue 11): the 32-channel 3x3 depthwise window kernels through auto (fbac82e) against
# what auto took before them (the 16-channel window kernel, or the TMA depthwise kernel at 256+ channels),
# same process, on random_dw_2026120427 and random_dw3w_2026120428 (drawn after B2, before this run) and
# the corpus. gpu_dw_configs_ab.py: every launch verified three times against float64, dW and workspace poisoned.
# Build (CPU): compile-all --corpus each set into a copy of a9cache; skwgrad cache export. Carried: .whl, .device/b3.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/b3.tar.xz
S=benchmarks/shapes
timeout 500 python3 benchmarks/gpu_dw_configs_ab.py --cache /tmp/pc --corpus $S/random_dw_2026120427.csv --corpus $S/random_dw3w_2026120428.csv \
  --corpus tests/data/wgrad_shapes.csv --rounds 5 --commit "${X_COMMIT:-}" --budget-s 440 --out $OUT/dw_auto_b3.json 2>&1 | cut -c1-300 | tail -60
echo "ab rc=$? $(( $(date +%s) - t0 )) s"
