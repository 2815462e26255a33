#!/usr/bin/env bash
# H200, session 26. (1) Issue 11: the depthwise window kernels with a register cap per mode, so more
# CTAs share an SM (benchmarks/proposals/dwconv_window_regcap.diff: 3x3 stride 1 168 -> 3 CTAs, 7x7 and
# 3x3 stride 2 128 -> 4, 5x5 96 -> 5, 5x5/7x7 stride 2 80 -> 6), against the shipped builds: ab_caches.py
# times auto's launch and the model's 2 best dwconv launches from A (the default sm_90 cache of HEAD's
# source) against the same labels in B (compile-all --corpus of the three sets with the patch applied),
# interleaved, B verified against A. Sets: dw_models_2026-12-04 and two drawn for this run before
# anything was timed (dw_random_2026120551, dw_wide_2026120552). Then run-from-cache against cuDNN on
# the two new sets, with A and with B (patched tree: the process serves B's entries).
# (2) Issues 10/12: what the dW memset of auto's atomic launches costs (gpu_memset_probe.py) on
# ResNet-50's layers and the models' depthwise layers, and cuBLAS's GEMM on the 1x1 rows.
# Carried: .whl, .device/d3.tar.xz, .device/regcap.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/d3.tar.xz
rm -rf /tmp/pb; python3 -m skwgrad cache import .device/regcap.tar.xz --cache /tmp/pb | tail -1
S=benchmarks/shapes; C="--corpus $S/dw_models_2026-12-04.csv --corpus $S/dw_random_2026120551.csv --corpus $S/dw_wide_2026120552.csv"
mkdir -p /tmp/o
timeout 250 python3 benchmarks/ab_caches.py --a /tmp/pc --b /tmp/pb $C --families dwconv --top 2 --rounds 4 --iters 20 \
  --budget-s 230 --out /tmp/o/ab_regcap.json > /tmp/o/ab_regcap.log 2>&1
echo "ab rc=$? $(( $(date +%s) - t0 )) s"; grep -v "^ *$" /tmp/o/ab_regcap.log | tail -12 | cut -c1-240
timeout 100 python3 benchmarks/gpu_memset_probe.py --cache /tmp/pc --corpus $S/model_resnet50_2026-12-04.csv --corpus $S/dw_models_2026-12-04.csv \
  --commit "${X_COMMIT:-}" --budget-s 80 --out /tmp/o/memset_probe.json > /tmp/o/memset_probe.log 2>&1
echo "probe rc=$? $(( $(date +%s) - t0 )) s"; tail -2 /tmp/o/memset_probe.log | cut -c1-300
for s in dw_random_2026120551 dw_wide_2026120552; do
  timeout 70 python3 -m skwgrad run-from-cache --cache /tmp/pc --corpus $S/$s.csv --verify --bench --baseline cudnn --iters 30 \
    --out /tmp/o/auto_a_$s.json > /tmp/o/auto_a_$s.log 2>&1; echo "auto A $s rc=$? $(( $(date +%s) - t0 )) s"; tail -2 /tmp/o/auto_a_$s.log | cut -c1-300
done
git apply benchmarks/proposals/dwconv_window_regcap.diff && echo patched
for s in dw_random_2026120551 dw_wide_2026120552; do
  timeout 70 python3 -m skwgrad run-from-cache --cache /tmp/pb --corpus $S/$s.csv --verify --bench --baseline cudnn --iters 30 \
    --out /tmp/o/auto_b_$s.json > /tmp/o/auto_b_$s.log 2>&1; echo "auto B $s rc=$? $(( $(date +%s) - t0 )) s"; tail -2 /tmp/o/auto_b_$s.log | cut -c1-300
done
tar -C /tmp/o -cJf $OUT/e1.tar.xz .
