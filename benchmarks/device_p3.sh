#!/usr/bin/env bash
# H200, session 11 run P3, on the sm_90 default with the split-K workspace epilogue and the fp16 /
# fp16 window kernels (m.tar.xz, 460 kernels) and the GPU-test kernels of the same source (g4.tar.xz).
#   bash benchmarks/device_p3.sh a   the GPU suite; random_2026120231 (30 dense, drawn before this
#                                    session's changes): auto verified against float64 with cuDNN beside,
#                                    every candidate timed, auto and the sweep's leaders re-timed in one pass
#   bash benchmarks/device_p3.sh b   the same for random_dw_2026120231 and random_g_2026120231; auto over
#                                    the corpus, verified; gpu_depthwise.py on the fp16 / fp16 depthwise rows
# Everything lands in $OUT/p3<part>.tar.xz. Carried: .whl, .device/m.tar.xz, .device/g4.tar.xz (a),
# .device/e.tar.xz (b).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
part=$1; R=/tmp/p3$part; mkdir -p $R; t0=$(date +%s)
python3 -m skwgrad cache import .device/m.tar.xz --cache /tmp/mc | tail -1
set_run() {  # name csv duel_budget
  local n=$1 csv=$2
  timeout 150 python3 -m skwgrad run-from-cache --cache /tmp/mc --corpus $csv --verify --bench --baseline cudnn --iters 30 --out $R/auto_$n.json > $R/auto_$n.log 2>&1
  echo "auto $n rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $R/auto_$n.log
  timeout 200 python3 -m skwgrad calibrate --cache /tmp/mc --dry-run --corpus $csv --out $R/all_$n.json 2> $R/all_$n.log | tail -1
  echo "all $n rc=$? $(( $(date +%s) - t0 )) s"
  timeout $(( $3 + 30 )) python3 benchmarks/duel_auto_tuned.py --cache /tmp/mc --all $R/all_$n.json --budget-s $3 --out $R/duel_$n.json > $R/duel_$n.log 2>&1
  echo "duel $n rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $R/duel_$n.log
}
S=benchmarks/shapes
if [ "$part" = a ]; then
  python3 -m skwgrad cache import .device/g4.tar.xz --cache /tmp/gc | tail -1
  SKWGRAD_CACHE=/tmp/gc timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_launcher.py -p no:cacheprovider > $R/gpu_suite.log 2>&1
  echo "suite rc=$? $(( $(date +%s) - t0 )) s"; tail -2 $R/gpu_suite.log
  set_run random31 $S/random_2026120231.csv 120
else
  set_run random_dw31 $S/random_dw_2026120231.csv 80
  set_run random_g31 $S/random_g_2026120231.csv 80
  timeout 150 python3 -m skwgrad run-from-cache --cache /tmp/mc --corpus tests/data/wgrad_shapes.csv --verify --bench --baseline cudnn --iters 30 --out $R/auto_corpus.json > $R/auto_corpus.log 2>&1
  echo "auto corpus rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $R/auto_corpus.log
  timeout 90 python3 benchmarks/gpu_depthwise.py run --cache /tmp/mc --only effnet_dw5x5_240ch_28_fp16,new_dw7x7_s2_128ch_64_fp16,effnet_dw5x5_s2_144ch_56_fp16 --budget-s 60 --out $R/depthwise_fp16.json > $R/depthwise_fp16.log 2>&1
  echo "dw fp16 rc=$? $(( $(date +%s) - t0 )) s"; tail -4 $R/depthwise_fp16.log
  # the window kernels' per-warp atomic epilogue (e.tar.xz: built from that source for the
  # depthwise rows) against this source's, the same launches interleaved, B's dW checked against A's
  python3 -m skwgrad cache import .device/e.tar.xz --cache /tmp/ec | tail -1
  timeout 150 python3 benchmarks/ab_caches.py --a /tmp/mc --b /tmp/ec --corpus $S/dws1_2026-12-01.csv --corpus $S/dwcorpus_2026-12-01.csv \
    --budget-s 120 --out $R/ab_dw.json > $R/ab_dw.log 2>&1; echo "ab rc=$? $(( $(date +%s) - t0 )) s"; grep -E '^\S+\.csv:' $R/ab_dw.log
fi
tar -C $R -cJf $OUT/p3$part.tar.xz .
