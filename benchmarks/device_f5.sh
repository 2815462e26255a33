#!/usr/bin/env bash
# H200, session 27: cost model 15 (fill_tma_extra_waves, a price per wave of a TMA grid beyond the first) judged in one
# process: gpu_tma_auto.py with auto_prev = model 14 (the term at 0, --prev-constant), on the 10 rows whose pick it
# changes offline (tma_extra_waves_flip_2026-12-04: 3 of random_large_2026120608, drawn for this run; 3 of
# random_2026120604 and 1 of pw_random_2026120605, drawn before F4 and not in the fit; 3 corpus rows, in the fit),
# every launch verified. Then benchmarks/dram_probe.py: how fast the H200 reads 32-200 MB in practice.
# Model 15 was a proposal when this was written (session 27); run F5 timed it and it shipped.
# Carried: .whl, .device/f0.tar.xz (the default sm_90 cache of e263171's source; costmodel.py is not a key file).
set -uo pipefail
source benchmarks/device_setup.sh .device/f0.tar.xz
S=benchmarks/shapes; mkdir -p /tmp/o
timeout 240 python3 benchmarks/gpu_tma_auto.py --cache /tmp/pc --top 2 --top-old 2 --no-end-to-end --rounds 5 \
  --prev-constant fill_tma_extra_waves=0 --corpus $S/tma_extra_waves_flip_2026-12-04.csv --out /tmp/o/extra_waves.json > /tmp/o/extra_waves.log 2>&1
echo "extra_waves rc=$? $(( $(date +%s) - t0 )) s"; cat /tmp/o/extra_waves.log | cut -c1-260 | tail -12
# and the practical read ceiling of the memory-bound 1x1 layers (issue 12; benchmarks/dram_probe.py)
timeout 120 python3 benchmarks/dram_probe.py --out /tmp/o/dram_probe.json > /tmp/o/dram_probe.log 2>&1
echo "dram_probe rc=$? $(( $(date +%s) - t0 )) s"; tail -4 /tmp/o/dram_probe.log
tar -C /tmp/o -cJf $OUT/f5.tar.xz .
