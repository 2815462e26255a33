#!/usr/bin/env bash
# H200, session 12 run Q1.
#  1. gpu_launcher.py capture,host on the sm_90 default (f.tar.xz, 475 kernels): every split-K
#     and stream-K reduction (split-K workspace included) captured in a CUDA graph and replayed
#     100 times, checked against float64; host time and end to end of the user's call.
#  2. tf32 operand path: the fp32 kernels selection can choose for the tf32 rows of
#     shapes/tf32_2026-12-02.csv built twice from the same source, A as shipped (wgmma, operands
#     transposed through registers into shared memory) and B with Triton's DISABLE_MMA_V3=1
#     (mma.sync, operands read from shared memory by the MMA's own fragment loads). Each verified
#     against float64 with cuDNN beside (auto), every candidate timed (calibrate --dry-run), and
#     the same launches interleaved A against B (ab_caches.py, B's dW checked against A's).
# Carried: .whl, .device/f.tar.xz, .device/t32a.tar.xz, .device/t32b.tar.xz. Output: $OUT/q1.tar.xz.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
R=/tmp/q1; mkdir -p $R; t0=$(date +%s); csv=benchmarks/shapes/tf32_2026-12-02.csv
for c in a b; do python3 -m skwgrad cache import .device/t32$c.tar.xz --cache /tmp/t$c | tail -1; done
for c in a b; do
  timeout 100 python3 -m skwgrad run-from-cache --cache /tmp/t$c --corpus $csv --verify --bench --baseline cudnn --iters 30 --out $R/auto_tf32_$c.json > $R/auto_tf32_$c.log 2>&1
  echo "auto $c rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $R/auto_tf32_$c.log
done
for c in a b; do
  timeout 120 python3 -m skwgrad calibrate --cache /tmp/t$c --dry-run --corpus $csv --out $R/all_tf32_$c.json 2> $R/all_tf32_$c.log | tail -1
  echo "all $c rc=$? $(( $(date +%s) - t0 )) s"
done
timeout 150 python3 benchmarks/ab_caches.py --a /tmp/ta --b /tmp/tb --corpus $csv --top 4 --budget-s 120 --out $R/ab_tf32.json > $R/ab_tf32.log 2>&1
echo "ab rc=$? $(( $(date +%s) - t0 )) s"; grep -E '\.csv:' $R/ab_tf32.log
python3 -m skwgrad cache import .device/f.tar.xz --cache /tmp/fc | tail -1
timeout 200 python3 benchmarks/gpu_launcher.py --cache /tmp/fc --parts capture,host --out $R/launcher.json > $R/launcher.log 2>&1
echo "launcher rc=$? $(( $(date +%s) - t0 )) s"; grep -E '^capture' $R/launcher.log | cut -c1-150
tar -C $R -cJf $OUT/q1.tar.xz .
