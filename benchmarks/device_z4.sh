#!/usr/bin/env bash
# H200, session 21 (issues 12, 11): the TMA producer warp without divisions in its ring loop (tap
# offsets once per tile, the row position moved on by additions) against the producer before
# (58806e5's kernel source), the same launches from two caches in one process (ab_caches.py,
# interleaved rounds, B's dW checked against A's), on 3-D and 2-D dense and grouped rows; and the
# GPU suite's TMA cases on the new kernels (their own cache).
# Build (CPU): A = 58806e5's source (a worktree at 1a1f3f9): compile-all --preset default --arch sm_90 --corpus each set
#   --cache .device/z1cache; B = this tree: the same into .device/z4cache; python tests/test_gpu_launcher.py build-cache
#   .device/suitecache4; skwgrad cache export each. Carried: .whl, .device/z4a.tar.xz, .device/z4b.tar.xz, .device/suite4.tar.xz.
set -uo pipefail
source benchmarks/device_setup.sh .device/suite4.tar.xz
SKWGRAD_CACHE=/tmp/pc timeout 120 python3 -m pytest -q -m gpu tests/test_gpu_launcher.py -k tma -p no:cacheprovider > $OUT/gpu_tma.log 2>&1
echo "gpu suite rc=$? $(( $(date +%s) - t0 )) s"; tail -2 $OUT/gpu_tma.log | cut -c1-300; grep -E "^(FAILED|ERROR)" $OUT/gpu_tma.log | head -5 | cut -c1-300
rm -rf /tmp/pa /tmp/pb
python3 -m skwgrad cache import .device/z4a.tar.xz --cache /tmp/pa | tail -1
python3 -m skwgrad cache import .device/z4b.tar.xz --cache /tmp/pb | tail -1
timeout 400 python3 benchmarks/ab_caches.py --a /tmp/pa --b /tmp/pb --families wgrad_tma --top 3 --rounds 4 --iters 20 --budget-s 340 \
  --corpus benchmarks/shapes/random_3d_2026120402.csv --corpus tests/data/wgrad_shapes.csv \
  --corpus benchmarks/shapes/random_g_2026120499.csv --corpus benchmarks/shapes/random_2026120500.csv \
  --out $OUT/${AB_NAME:-producer_ab_z4}.json 2>&1 | grep -E "json: |budget|Error" | cut -c1-400
echo "ab rc=$? $(( $(date +%s) - t0 )) s"
