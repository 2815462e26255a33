#!/usr/bin/env bash
# H200, session 12 run Q2: tf32 on mma.sync, with and without the "+ 0.0" that made wgmma's
# operands go through registers. B = t32b.tar.xz (run Q1's mma.sync build, with it), C = t32c.tar.xz
# (the same kernels from a source without it): the same launches interleaved (ab_caches.py, C's dW
# checked against B's), B was verified against float64 in Q1.
# Carried: .whl, .device/t32b.tar.xz, .device/t32c.tar.xz. Output: $OUT/q2.tar.xz.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
R=/tmp/q2; mkdir -p $R; t0=$(date +%s); csv=benchmarks/shapes/tf32_2026-12-02.csv
for c in b c; do python3 -m skwgrad cache import .device/t32$c.tar.xz --cache /tmp/t$c | tail -1; done
timeout 150 python3 benchmarks/ab_caches.py --a /tmp/tb --b /tmp/tc --corpus $csv --top 4 --budget-s 120 --out $R/ab_tf32_noadd.json > $R/ab_tf32_noadd.log 2>&1
echo "ab rc=$? $(( $(date +%s) - t0 )) s"; grep -E '\.csv:' $R/ab_tf32_noadd.log; grep -c "differs\|Error" $R/ab_tf32_noadd.log
tar -C $R -cJf $OUT/q2.tar.xz .
