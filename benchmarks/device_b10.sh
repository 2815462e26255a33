#!/usr/bin/env bash
# H200, session 23 (issue 11): B7 again with the user's call timed too (host included: skwgrad.wgrad, the
# custom op and PyTorch's weight gradient on channels-last tensors, gpu_tma_auto.end_to_end), on the same sets
# (random_dw_s2_2026120433, random_dw_2026120434, the corpus): what a user gets from the session's changes.
# Carried: .whl, .device/b7.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/b7.tar.xz
S=benchmarks/shapes
timeout 500 python3 benchmarks/gpu_dw_configs_ab.py --cache /tmp/pc --corpus $S/random_dw_s2_2026120433.csv --corpus $S/random_dw_2026120434.csv \
  --corpus tests/data/wgrad_shapes.csv --rounds 5 --end-to-end --commit "${X_COMMIT:-}" --budget-s 440 --out $OUT/dw_auto_b10.json 2>&1 | cut -c1-300 | tail -60
echo "ab rc=$? $(( $(date +%s) - t0 )) s"
