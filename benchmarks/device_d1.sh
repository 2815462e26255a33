#!/usr/bin/env bash
# (The diff it applies was removed when it shipped, b330904: `git show 4c73f2f:benchmarks/proposals/dwconv_window_epilogue.diff`.)
# H200, session 25 (issue 11): the depthwise window epilogue without a shuffle tree
# (benchmarks/proposals/dwconv_window_epilogue.diff) against the shipped one, at 32 and 16 KiB of shared
# memory a CTA. Sets: dw_models_2026-12-04 (the 23 distinct depthwise layers of the four C1 models) and
# dw_random_2026120461 (20 depthwise/grouped layers drawn for this run before anything was timed).
# A: the default sm_90 cache (HEAD's source); B32/B16: `compile-all --corpus` of both sets with the patch
# applied (WIN_EPI_SMEM 32768 / 16384). ab_caches.py times auto's launch and the model's 3 best dwconv
# launches from A against the same labels in B, interleaved, B verified against A. Then run-from-cache
# against cuDNN with A (HEAD) and with B32;
# between them, gpu_dwconv_tma_ab.py on the models' set (auto vs the window kernel where auto takes dwconv_tma) (the patch applied here, so the process serves B's entries).
# Carried: .whl, .device/d.tar.xz, .device/epi32.tar.xz, .device/epi16.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/d.tar.xz
for v in 32 16; do rm -rf /tmp/pb$v; python3 -m skwgrad cache import .device/epi$v.tar.xz --cache /tmp/pb$v | tail -1; done
S=benchmarks/shapes; C="--corpus $S/dw_models_2026-12-04.csv --corpus $S/dw_random_2026120461.csv"; mkdir -p /tmp/o
for v in 32 16; do
  timeout 170 python3 benchmarks/ab_caches.py --a /tmp/pc --b /tmp/pb$v $C --families dwconv --top 3 --rounds 4 --iters 20 \
    --budget-s 150 --out /tmp/o/ab_epi$v.json > /tmp/o/ab_epi$v.log 2>&1
  echo "ab $v rc=$? $(( $(date +%s) - t0 )) s"; grep -v "^ *$" /tmp/o/ab_epi$v.log | tail -45 | cut -c1-200
done
for s in dw_models_2026-12-04 dw_random_2026120461; do
  timeout 80 python3 -m skwgrad run-from-cache --cache /tmp/pc --corpus $S/$s.csv --verify --bench --baseline cudnn --iters 30 \
    --out /tmp/o/auto_a_$s.json > /tmp/o/auto_a_$s.log 2>&1; echo "auto A $s rc=$? $(( $(date +%s) - t0 )) s"; tail -3 /tmp/o/auto_a_$s.log | cut -c1-300
done
timeout 130 python3 benchmarks/gpu_dwconv_tma_ab.py --cache /tmp/pc --corpus $S/dw_models_2026-12-04.csv --budget-s 110 \
  --out /tmp/o/dwconv_tma_ab_models.json > /tmp/o/dwconv_tma_ab_models.log 2>&1; echo "tma ab rc=$? $(( $(date +%s) - t0 )) s"; tail -26 /tmp/o/dwconv_tma_ab_models.log | cut -c1-200
git apply benchmarks/proposals/dwconv_window_epilogue.diff && echo patched
for s in dw_models_2026-12-04 dw_random_2026120461; do
  timeout 80 python3 -m skwgrad run-from-cache --cache /tmp/pb32 --corpus $S/$s.csv --verify --bench --baseline cudnn --iters 30 \
    --out /tmp/o/auto_b32_$s.json > /tmp/o/auto_b32_$s.log 2>&1; echo "auto B32 $s rc=$? $(( $(date +%s) - t0 )) s"; tail -3 /tmp/o/auto_b32_$s.log | cut -c1-300
done
tar -C /tmp/o -cJf $OUT/d1.tar.xz .
