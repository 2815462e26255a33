#!/usr/bin/env bash
# H200, session 19 (issue 11): the TMA depthwise prototype v2 (dw_tma_proto.py, configurations fixed
# at 14fa14e) on random_dw_2026120491 (drawn after them) against cuDNN and the product's auto at
# c3c6c2c's rules. Build: .venv/bin/python benchmarks/dw_tma_proto.py build --out .device/dwtma and
# device_x4.sh's cache. Carried: .whl, .device/x4.tar.xz, .device/dwtma.
set -uo pipefail
source benchmarks/device_setup.sh .device/x4.tar.xz
timeout 270 python3 benchmarks/dw_tma_proto.py run --objs .device/dwtma --cache /tmp/pc --commit "${X_COMMIT:-}" \
  --corpus benchmarks/shapes/random_dw_2026120491.csv --budget-s 230 --out $OUT/dwtma_91.json 2>&1 | cut -c1-260 | tail -20
