#!/usr/bin/env bash
# H200, session 13 run R3 (issue 12): in one process set, on the same machine,
#  - the shipped selection (auto) on a corpus-built sm_90 cache of this session's source
#    (.device/pc.tar.xz: `compile-all --preset default --arch sm_90 --corpus tests/data/wgrad_shapes.csv
#    --corpus benchmarks/shapes/random_2026120334.csv`, 176 kernels), verified against float64, cuDNN beside;
#  - the Gluon TMA-im2col main loop of benchmarks/mainloop/gluon_wgrad.py (.device/gluon, built by
#    `gluon_run.py build`), every configuration and split degree checked and timed against cuDNN.
# Carried: .whl, .device/pc.tar.xz, .device/gluon. Everything lands in $OUT.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m skwgrad cache import .device/pc.tar.xz --cache /tmp/pc | tail -1
for n in corpus:tests/data/wgrad_shapes.csv random34:benchmarks/shapes/random_2026120334.csv; do
  timeout 200 python3 -m skwgrad run-from-cache --cache /tmp/pc --corpus ${n#*:} --verify --bench --baseline cudnn \
    --iters 30 --out $OUT/auto_${n%%:*}.json > $OUT/auto_${n%%:*}.log 2>&1
  echo "auto ${n%%:*} rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $OUT/auto_${n%%:*}.log
done
timeout 300 python3 benchmarks/mainloop/gluon_run.py run --objs .device/gluon --corpus tests/data/wgrad_shapes.csv \
  --corpus benchmarks/shapes/random_2026120334.csv --out $OUT/gluon_r3.json --reps 20 > $OUT/gluon_r3.log 2>&1
echo "gluon rc=$? $(( $(date +%s) - t0 )) s"; grep -v "not ok" $OUT/gluon_r3.log | tail -50
