#!/usr/bin/env bash
# H200, session 23 (issue 11): auto with the channel-block rule (638af5e; the 16-channel 7x7 window kernel where
# 32-channel blocks pad a quarter more, the 32-channel 3x3 one from 3 blocks) against auto without the second
# blocks, same process, on random_dw7l_2026120430 and random_dw_2026120431 (drawn after B4, before this run) and
# the corpus. gpu_dw_configs_ab.py: every launch verified three times against float64, dW and workspace poisoned.
# Build (CPU): compile-all --corpus each set into a copy of a9cache; skwgrad cache export. Carried: .whl, .device/b5.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/b5.tar.xz
S=benchmarks/shapes
timeout 500 python3 benchmarks/gpu_dw_configs_ab.py --cache /tmp/pc --corpus $S/random_dw7l_2026120430.csv --corpus $S/random_dw_2026120431.csv \
  --corpus tests/data/wgrad_shapes.csv --rounds 5 --commit "${X_COMMIT:-}" --budget-s 440 --out $OUT/dw_auto_b5.json 2>&1 | cut -c1-300 | tail -60
echo "ab rc=$? $(( $(date +%s) - t0 )) s"
