#!/usr/bin/env bash
# H200, session 26: can the ~2 us dW memset before an atomic launch (run E1) hide behind the kernel
# through programmatic dependent launch? benchmarks/pdl_probe.py (Triton JIT on the device, no cache).
set -uo pipefail
export PYTHONUNBUFFERED=1; mkdir -p /tmp/o; t0=$(date +%s)
timeout 200 python3 benchmarks/pdl_probe.py --commit "${X_COMMIT:-}" --out /tmp/o/pdl_probe.json > /tmp/o/pdl_probe.log 2>&1
echo "probe rc=$? $(( $(date +%s) - t0 )) s"; cut -c1-400 /tmp/o/pdl_probe.log | tail -12
tar -C /tmp/o -cJf $OUT/e2.tar.xz .
