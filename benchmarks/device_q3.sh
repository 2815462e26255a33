#!/usr/bin/env bash
# H200, session 12 runs Q3 (a) and Q4 (b), on the sm_90 default of this session's source (h.tar.xz:
# tf32 on mma.sync without the register-transpose adds, the tf32 cost-model terms refitted) and
# the GPU-test kernels of the same source (g5.tar.xz).
#   bash benchmarks/device_q3.sh a   the GPU suite; random_2026120233 (30 dense, drawn before this
#                                    session's changes, 3014c79): auto verified against float64 with
#                                    cuDNN beside, every candidate timed, auto and the sweep's leaders
#                                    re-timed in one pass; auto on the tf32 layers of Q1/Q2
#   bash benchmarks/device_q3.sh b   the same for random_dw_2026120233 and random_g_2026120233; auto
#                                    over the corpus, verified
# Everything lands in $OUT/q3<part>.tar.xz. Carried: .whl, .device/h.tar.xz, .device/g5.tar.xz (a).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
part=$1; R=/tmp/q3$part; mkdir -p $R; t0=$(date +%s)
python3 -m skwgrad cache import .device/h.tar.xz --cache /tmp/hc | tail -1
set_run() {  # name csv duel_budget
  local n=$1 csv=$2
  timeout 150 python3 -m skwgrad run-from-cache --cache /tmp/hc --corpus $csv --verify --bench --baseline cudnn --iters 30 --out $R/auto_$n.json > $R/auto_$n.log 2>&1
  echo "auto $n rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $R/auto_$n.log
  timeout 200 python3 -m skwgrad calibrate --cache /tmp/hc --dry-run --corpus $csv --out $R/all_$n.json 2> $R/all_$n.log | tail -1
  echo "all $n rc=$? $(( $(date +%s) - t0 )) s"
  timeout $(( $3 + 30 )) python3 benchmarks/duel_auto_tuned.py --cache /tmp/hc --all $R/all_$n.json --budget-s $3 --out $R/duel_$n.json > $R/duel_$n.log 2>&1
  echo "duel $n rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $R/duel_$n.log
}
S=benchmarks/shapes
if [ "$part" = a ]; then
  python3 -m skwgrad cache import .device/g5.tar.xz --cache /tmp/gc | tail -1
  SKWGRAD_CACHE=/tmp/gc timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_launcher.py -p no:cacheprovider > $R/gpu_suite.log 2>&1
  echo "suite rc=$? $(( $(date +%s) - t0 )) s"; tail -2 $R/gpu_suite.log
  set_run random33 $S/random_2026120233.csv 100
  timeout 90 python3 -m skwgrad run-from-cache --cache /tmp/hc --corpus $S/tf32_2026-12-02.csv --verify --bench --baseline cudnn --iters 30 --out $R/auto_tf32.json > $R/auto_tf32.log 2>&1
  echo "auto tf32 rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $R/auto_tf32.log
else
  set_run random_dw33 $S/random_dw_2026120233.csv 60
  set_run random_g33 $S/random_g_2026120233.csv 60
  timeout 150 python3 -m skwgrad run-from-cache --cache /tmp/hc --corpus tests/data/wgrad_shapes.csv --verify --bench --baseline cudnn --iters 30 --out $R/auto_corpus.json > $R/auto_corpus.log 2>&1
  echo "auto corpus rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $R/auto_corpus.log
fi
tar -C $R -cJf $OUT/q3$part.tar.xz .
