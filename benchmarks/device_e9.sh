#!/usr/bin/env bash
# H200, session 26: issue 11's status after the dependent launches (bf5a507): auto against cuDNN through
# run-from-cache --verify --bench on a depthwise/grouped set drawn for this run (dw_random_2026120557) and on
# dw_random_2026120551 (drawn before E1; its E1 runs timed out).
# Carried: .whl, .device/e8.tar.xz (the default sm_90 cache of bf5a507's source).
set -uo pipefail
source benchmarks/device_setup.sh .device/e8.tar.xz
S=benchmarks/shapes; mkdir -p /tmp/o
for s in dw_random_2026120557 dw_random_2026120551; do
  timeout 150 python3 -m skwgrad run-from-cache --cache /tmp/pc --corpus $S/$s.csv --verify --bench --baseline cudnn --iters 30 \
    --out /tmp/o/auto_$s.json > /tmp/o/auto_$s.log 2>&1; echo "auto $s rc=$? $(( $(date +%s) - t0 )) s"; tail -2 /tmp/o/auto_$s.log | cut -c1-300
done
tar -C /tmp/o -cJf $OUT/e9.tar.xz .
