#!/usr/bin/env bash
# H200, session 15 run T7 (issue 12): the TMA epilogue stored from the wgmma layout (no shared-memory
# round trip, no CTA barriers between loop and stores) against the blocked-layout epilogue of T4's
# kernels, the same launches in one run: gpu_tma_auto.py on 12 rows of T4's sets where auto took a
# TMA kernel (benchmarks/shapes/ab_tma_epilogue_t52.csv), first on T4's cache (old epilogue), then on
# a cache built at this commit; the model and so the candidates are the same. Every timed launch
# verified against float64 (dW poisoned). Then the GPU suite's TMA cases, time-boxed.
# What happened (recorded after the run): the old half timed nothing (a cache of other kernel sources
# is never served: T4's numbers for the same launches stood in, cuDNN-normalised), and the GPU suite
# needs SKWGRAD_CACHE with its kernels built on the build machine (the device compiles none), so its
# fixture failed in 2 s; the 12 rows' launches were all verified against float64.
# Carried: .whl, .device/t4.tar.xz, .device/t7.tar.xz (`compile-all --preset default --arch sm_90 --corpus` the subset).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
t0=$(date +%s)
rm -rf /tmp/old /tmp/new
python3 -m skwgrad cache import .device/t4.tar.xz --cache /tmp/old | tail -1
python3 -m skwgrad cache import .device/t7.tar.xz --cache /tmp/new | tail -1
for c in old new; do
  timeout 60 python3 benchmarks/gpu_tma_auto.py --cache /tmp/$c --no-end-to-end --top 3 --corpus benchmarks/shapes/ab_tma_epilogue_t52.csv \
    --out $OUT/ab_$c.json > $OUT/ab_$c.log 2>&1
  echo "ab $c rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $OUT/ab_$c.log | cut -c1-300
done
timeout 50 python3 -m pytest -q -p no:cacheprovider -x tests/test_gpu_launcher.py -k tma 2>&1 | tail -3
echo "gpu tma tests $(( $(date +%s) - t0 )) s"
