#!/usr/bin/env bash
# H200, session 16 run U6 (issue 11): the refitted window split rule (DWCONV_WIN_CTA_COST 2000,
# DWCONV_WIN_ATOMIC_COST 2) against the previous (8000, 3) through auto, ABBA on one cache (the
# kernels are the same; the previous rule is this tree with the two constants set back by sed on
# the device's copy). Rows: U4's 10 7x7 layers and the 8 drawn before the refit
# (shapes/dw7_random_2026120302.csv); every row verified against float64 beside cuDNN in benchmark mode.
# Carried: .whl, .device/u6.tar.xz (compile-all --preset default --arch sm_90 --corpus both sets).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
t0=$(date +%s)
rm -rf /tmp/c; python3 -m skwgrad cache import .device/u6.tar.xz --cache /tmp/c | tail -1
rule() {  # new | old
  if [ "$1" = old ]; then v=(8000 3); else v=(2000 2); fi
  sed -i -E "s/^DWCONV_WIN_CTA_COST = [0-9]+/DWCONV_WIN_CTA_COST = ${v[0]}/; s/^DWCONV_WIN_ATOMIC_COST = [0-9]+/DWCONV_WIN_ATOMIC_COST = ${v[1]}/" skwgrad/abi/launch.py
}
i=0
for r in new old old new; do
  i=$((i + 1)); rule $r
  for set in dw7_window_2026120301 dw7_random_2026120302; do
    timeout 80 python3 -m skwgrad run-from-cache --cache /tmp/c --corpus benchmarks/shapes/$set.csv \
      --verify --bench --baseline cudnn --iters 50 --out $OUT/u6_${i}_${r}_${set%%_2026*}.json > /dev/null 2>&1
    echo "pass $i $r $set rc=$? $(( $(date +%s) - t0 )) s"
  done
done
rule new
