#!/usr/bin/env bash
# (The diff it applies was removed when it shipped, b330904: `git show 4c73f2f:benchmarks/proposals/dwconv_window_epilogue.diff`.)
# H200, session 25 (issue 11): after D1 (the window epilogue without a shuffle tree, 0.91x / 0.96x the time of
# the shipped one, slower only on the 32-channel 3x3 kernel at 55-56 px):
# 1. its shared-memory budget, 8 KiB against 16 KiB a CTA (ab_caches, A = B16, B = B8) on D1's two sets;
# 2. the TMA depthwise family against the window kernels with the new epilogue (gpu_dwconv_tma_ab.py, this
#    process serving B16: the patch applied here at 16 KiB) on dw_wide_2026120462 (14 depthwise layers of
#    256-768 channels drawn for this run) and the models' depthwise layers, cuDNN beside.
# Carried: .whl, .device/epi16.tar.xz (B16: D1's sets and dw_wide_2026120462), .device/epi8.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/epi16.tar.xz
rm -rf /tmp/pb8; python3 -m skwgrad cache import .device/epi8.tar.xz --cache /tmp/pb8 | tail -1
S=benchmarks/shapes; mkdir -p /tmp/o
git apply benchmarks/proposals/dwconv_window_epilogue.diff && sed -i 's|"WIN_EPI_SMEM": min(32768,|"WIN_EPI_SMEM": min(16384,|' skwgrad/aot/kernels/depthwise.py
python3 -c "import skwgrad.cache.store as s; print('identity', s._identity())"
timeout 150 python3 benchmarks/ab_caches.py --a /tmp/pc --b /tmp/pb8 --corpus $S/dw_models_2026-12-04.csv --corpus $S/dw_random_2026120461.csv \
  --families dwconv --top 3 --rounds 4 --iters 20 --budget-s 130 --out /tmp/o/ab_epi8.json > /tmp/o/ab_epi8.log 2>&1
echo "ab 8 rc=$? $(( $(date +%s) - t0 )) s"; grep -v "^ *$" /tmp/o/ab_epi8.log | cut -c1-42,95-200 | tail -45
timeout 260 python3 benchmarks/gpu_dwconv_tma_ab.py --cache /tmp/pc --corpus $S/dw_wide_2026120462.csv --corpus $S/dw_models_2026-12-04.csv \
  --budget-s 240 --out /tmp/o/dwconv_tma_ab.json > /tmp/o/dwconv_tma_ab.log 2>&1; echo "tma ab rc=$? $(( $(date +%s) - t0 )) s"
tail -40 /tmp/o/dwconv_tma_ab.log | cut -c1-200
tar -C /tmp/o -cJf $OUT/d2.tar.xz .
