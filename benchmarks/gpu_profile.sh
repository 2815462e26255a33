#!/usr/bin/env bash
# H200: Nsight Compute profiles of auto's kernels (and cuDNN's) on named rows, for kernel work.
#   bash benchmarks/gpu_profile.sh CACHE.tar.xz ROWNAME...   (rows of $CSV, default tests/data/wgrad_shapes.csv)
# Everything lands in $OUT/prof/ (ncu text reports, one per row and side). Carried: .whl, the export.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
P=$OUT/prof; mkdir -p $P
c=$1; shift
CSV=${CSV:-tests/data/wgrad_shapes.csv}
rm -rf /tmp/pc; python3 -m skwgrad cache import "$c" --cache /tmp/pc | tail -1
NCU="ncu --clock-control none --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section InstructionStats"
for row in "$@"; do
  grep "^$row," $CSV > /tmp/row.csv || { echo "no row $row"; continue; }
  (head -1 $CSV; cat /tmp/row.csv) > /tmp/one.csv
  echo "== $row"
  timeout 120 $NCU -k 'regex:dwconv|grouped|stage2|wgrad' --launch-skip 2 --launch-count 4 \
    python3 -m skwgrad run-from-cache --cache /tmp/pc --corpus /tmp/one.csv --bench --warmup 2 --iters 3 > $P/$row.skwgrad.txt 2>&1
  echo "skwgrad rc=$?"; grep -E "^  [a-z_]+.*\(|Duration|Achieved Occupancy|Registers Per|Issue Slots Busy|No Eligible" $P/$row.skwgrad.txt | head -30
  timeout 120 $NCU --nvtx --nvtx-include "prof/" python3 benchmarks/cudnn_one.py /tmp/one.csv "$row" > $P/$row.cudnn.txt 2>&1
  echo "cudnn rc=$?"; grep -E "^  [a-zA-Z_].*\(|Duration" $P/$row.cudnn.txt | head -12
done
