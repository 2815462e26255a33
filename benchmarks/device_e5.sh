#!/usr/bin/env bash
# H200, session 26: the TMA atomic class's fixed cost lowered by what E3 measured the dependent launch saves
# (fixed_tma_atomic 5.36226 -> 4.40226, abi.costmodel), judged in one process: gpu_tma_auto.py with auto_prev =
# the old constant (--prev-constant), on the 9 rows of four sets whose pick it changes offline
# (tma_atomic_flip_2026-12-04) and on a dense set drawn for this run (random_2026120554), every launch verified.
# Carried: .whl, .device/e3.tar.xz (the default sm_90 cache of 225e0d8's source; costmodel.py is not a key file).
set -uo pipefail
source benchmarks/device_setup.sh .device/e3.tar.xz
S=benchmarks/shapes; mkdir -p /tmp/o
timeout 420 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --top 2 --top-old 1 --no-end-to-end --prev-constant fixed_tma_atomic=5.36226 \
  --corpus $S/tma_atomic_flip_2026-12-04.csv --corpus $S/random_2026120554.csv --out /tmp/o/tma_atomic_cost.json > /tmp/o/tma_atomic_cost.log 2>&1
echo "tma_auto rc=$? $(( $(date +%s) - t0 )) s"; tail -1 /tmp/o/tma_atomic_cost.log | cut -c1-1200
tar -C /tmp/o -cJf $OUT/e5.tar.xz .
