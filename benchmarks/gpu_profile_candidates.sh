#!/usr/bin/env bash
# H200: Nsight Compute on named candidates of one problem (no cache flush: the L1/L2 hit rates of a
# kernel in steady state), one process per candidate (benchmarks/launch_candidate.py).
#   bash benchmarks/gpu_profile_candidates.sh CACHE.tar.xz NAME PROBLEM LABEL:POOL:KS...
# Text reports land in $OUT/prof/NAME.LABEL.POOL.KS.txt; with SOURCE=1 also .sass.csv: the SASS
# with its sampled warp stalls per instruction (ncu --page source). Carried: .whl, the export.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
P=$OUT/prof; mkdir -p $P
c=$1 name=$2 problem=$3; shift 3
[ -d /tmp/pcc ] || python3 -m skwgrad cache import "$c" --cache /tmp/pcc | tail -1
NCU="ncu --clock-control none --cache-control none --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section ComputeWorkloadAnalysis --section InstructionStats"
for cand in "$@"; do
  IFS=: read -r label pool ks <<< "$cand"
  f=$P/$name.$label.$pool.$ks.txt
  echo "== $name $label pool $pool ks $ks"
  src=(); [ -n "${SOURCE:-}" ] && src=(--section SourceCounters --import-source no -f -o /tmp/rep)
  timeout 120 $NCU "${src[@]}" -k "regex:^(wgrad|grouped|dwconv)" --launch-skip 2 --launch-count 1 \
    python3 benchmarks/launch_candidate.py --cache /tmp/pcc --problem "$problem" --kernel "$label" --pool "$pool" --ks "$ks" --launches 4 > $f 2>&1
  echo "rc=$?"
  if [ -n "${SOURCE:-}" ]; then  # -o writes no text report: print it from the saved one
    ncu -i /tmp/rep.ncu-rep > $f 2>&1; ncu -i /tmp/rep.ncu-rep --page source --csv --print-source sass > ${f%.txt}.sass.csv 2>&1
  fi
  grep -E "^  [a-z_]+.*\(|Duration|L1/TEX Hit Rate|L2 Hit Rate|DRAM Throughput|Issue Slots Busy|No Eligible|Registers Per|Achieved Occupancy|Stall Long|Mem Busy|Max Bandwidth|L1/TEX Cache Throughput|L2 Cache Throughput" $f | head -24
done
