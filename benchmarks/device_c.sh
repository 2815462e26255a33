#!/usr/bin/env bash
# H200 session 3 (2026-12-01), from the repo root; every output under one tar in $OUT (the device
# returns few files). Parts, in the order given:
#   presets CACHE.tar.xz        every cached candidate timed per corpus row (benchmarks/compare_presets.py):
#                               the pruned default is judged against broad on those timings, here and later
#   calib CACHE.tar.xz CSV...   every candidate of each CSV's problems timed (calibrate --dry-run), with
#                               auto (run-from-cache, no tuned records, cuDNN beside) on the same cache;
#                               `auto` / `all`: only the first / only the second
#   verify CACHE.tar.xz CSV     run-from-cache --verify on a corpus-built cache: a kernel for every row
#   dw CACHE.tar.xz             benchmarks/gpu_depthwise.py run --only _s2_,dil2 on that cache (stride-2 window kernels)
#   ab OLD.tar.xz NEW.tar.xz CSV...  two kernel sources, one pass: benchmarks/ab_caches.py times the same
#                               launches from both caches, interleaved, and checks NEW's dW against OLD's
#   DUEL=1 with calib/all: then benchmarks/duel_auto_tuned.py re-times auto's pick and the sweep's
#                               fastest candidates in one interleaved pass (auto vs tuned in one run)
#   ALT="m1.json m2.json" with DUEL=1: those cost models' picks are timed in the same duel (constants compared)
# Carried: .whl and the named exports. PKG=DIR runs the skwgrad package under DIR instead of this
# checkout's (an older source beside the current one, same run); TAG=name keeps its outputs apart
# ($OUT/c$TAG.tar.xz).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:${PKG:-$PWD} PYTHONUNBUFFERED=1
[ -n "${PKG:-}" ] && export PYTHONSAFEPATH=1  # python -m would put this checkout ahead of PKG
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
R=/tmp/rc${TAG:-}; mkdir -p $R
git log -1 --format=%H > $R/commit 2>/dev/null
t0=$(date +%s)
while [ $# -gt 0 ]; do
  part=$1; shift
  case $part in
  presets)
    c=$1; shift
    python3 -m skwgrad cache import "$c" --cache /tmp/pc | tail -1
    timeout 300 python3 benchmarks/compare_presets.py --cache /tmp/pc --out $R/compare_presets.json > $R/compare_presets.log 2>&1
    echo "presets rc=$? $(( $(date +%s) - t0 )) s"; tail -2 $R/compare_presets.log ;;
  calib|auto|all)
    c=$1; shift
    rm -rf /tmp/cc; python3 -m skwgrad cache import "$c" --cache /tmp/cc | tail -1
    while [ $# -gt 0 ] && [[ $1 == *.csv ]]; do
      n=$(basename "$1" .csv)
      if [ $part != all ]; then
        timeout 150 python3 -m skwgrad run-from-cache --cache /tmp/cc --corpus "$1" --verify --bench --baseline cudnn --iters 30 \
          --out $R/auto_$n.json > $R/auto_$n.log 2>&1; echo "auto $n rc=$? $(( $(date +%s) - t0 )) s"; tail -2 $R/auto_$n.log
      fi
      if [ $part != auto ]; then
        timeout 240 python3 -m skwgrad calibrate --cache /tmp/cc --dry-run --corpus "$1" --out $R/all_$n.json 2> $R/all_$n.log | tail -1
        echo "all $n rc=$? $(( $(date +%s) - t0 )) s"
        if [ -n "${DUEL:-}" ]; then  # auto and the sweep's leaders re-timed in one interleaved pass
          timeout 200 python3 benchmarks/duel_auto_tuned.py --cache /tmp/cc --all $R/all_$n.json --budget-s 170 $(for m in ${ALT:-}; do printf -- "--alt-model %s " "$m"; done) \
            --out $R/duel_$n.json > $R/duel_$n.log 2>&1; echo "duel $n rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $R/duel_$n.log
        fi
      fi
      shift
    done ;;
  verify)
    c=$1; n=$(basename "$2" .csv); rm -rf /tmp/vc; python3 -m skwgrad cache import "$c" --cache /tmp/vc | tail -1
    timeout 120 python3 -m skwgrad run-from-cache --cache /tmp/vc --corpus "$2" --verify --out $R/verify_$n.json > $R/verify_$n.log 2>&1
    echo "verify $n rc=$? $(( $(date +%s) - t0 )) s"; tail -2 $R/verify_$n.log; shift 2 ;;
  ab)
    # B's entries are of another kernel source than this checkout's: ab_caches.py reads each cache as
    # built, and checks B's dW against A's (A: verified against float64 by run-from-cache before).
    rm -rf /tmp/aa /tmp/ab; python3 -m skwgrad cache import "$1" --cache /tmp/aa | tail -1
    python3 -m skwgrad cache import "$2" --cache /tmp/ab | tail -1; shift 2
    csvs=(); while [ $# -gt 0 ] && [[ $1 == *.csv ]]; do csvs+=("$1"); shift; done
    timeout 420 python3 benchmarks/ab_caches.py --a /tmp/aa --b /tmp/ab $(printf -- '--corpus %s ' "${csvs[@]}") --budget-s 380 \
      --out $R/ab.json > $R/ab.log 2>&1; echo "ab rc=$? $(( $(date +%s) - t0 )) s"; grep -E '^\S+\.csv:' $R/ab.log ;;
  dw)
    d=$1; shift; rm -rf /tmp/dwc; python3 -m skwgrad cache import "$d" --cache /tmp/dwc | tail -1
    timeout 200 python3 benchmarks/gpu_depthwise.py run --cache /tmp/dwc --only _s2_,dil2 --out $R/depthwise_s2.json --budget-s 150 > $R/depthwise_s2.log 2>&1
    echo "dw rc=$? $(( $(date +%s) - t0 )) s"; tail -30 $R/depthwise_s2.log ;;
  *) echo "unknown part $part"; exit 2 ;;
  esac
  tar -C $R -cJf $OUT/c${TAG:-}.tar.xz .  # after every part: a later part's timeout loses nothing
done
echo "done $(( $(date +%s) - t0 )) s"
