#!/usr/bin/env bash
# H200 session, part 2 (2026-12-01): the PyTorch model bench (`torch`), the pruned default vs broad
# (`presets`), or the depthwise window-kernel bench (`dw`), or the issue-12 main-loop experiment
# (`mainloop`); everything under one tar in $OUT (the device returns few files).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
R=/tmp/r2; mkdir -p $R
for part in "$@"; do
  t0=$(date +%s)
  case $part in
  torch)
    python3 -m skwgrad cache import .device/b.tar.xz --cache /tmp/kc | tail -1
    SKWGRAD_CACHE=/tmp/kc timeout 330 python3 benchmarks/gpu_torch_model.py --out $R/torch_model.json --budget-s 275 > $R/torch_model.log 2>&1
    echo "torch rc=$?"; tail -40 $R/torch_model.log ;;
  mainloop)
    timeout 170 python3 benchmarks/mainloop/run.py --out $R/mainloop.json > $R/mainloop.log 2>&1
    echo "mainloop rc=$?"; tail -25 $R/mainloop.log ;;
  presets)
    python3 -m skwgrad cache import .device/p.tar.xz --cache /tmp/pc | tail -1
    timeout 250 python3 benchmarks/compare_presets.py --cache /tmp/pc --out $R/compare_presets.json > $R/compare_presets.log 2>&1
    echo "presets rc=$?"; tail -3 $R/compare_presets.log ;;
  dw)
    tar -C .device -xJf .device/dw2.tar.xz
    timeout 220 python3 benchmarks/gpu_depthwise.py run --kernels .device/dwkernels2 --out $R/depthwise.json --budget-s 170 > $R/depthwise.log 2>&1
    echo "dw rc=$?"; tail -40 $R/depthwise.log ;;
  esac
  echo "$part: $(( $(date +%s) - t0 )) s"
done
tar -C $R -cJf $OUT/b2_$(echo "$@" | tr ' ' _).tar.xz .
