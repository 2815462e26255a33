#!/usr/bin/env bash
# One batched GPU session (the device tool's run), from the repo root, writing under $OUT.
#   bash benchmarks/gpu_session.sh launcher   # GPU tests, launcher bench, run-from-cache over both corpora,
#                                             # tune-on-first-use across processes, depthwise/grouped bench
#   bash benchmarks/gpu_session.sh torch      # the PyTorch model bench (CUDA-graph check with its control)
# Carried: .whl (wheels the image lacks), .device/f.tar.xz (cache export), .device/dw.tar.xz (depthwise bench objects).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m skwgrad cache import .device/f.tar.xz --cache /tmp/kc | tail -1
export SKWGRAD_CACHE=/tmp/kc
case "${1:-launcher}" in
launcher)
  timeout 120 python3 -m pytest -q -m gpu tests/test_gpu_launcher.py -p no:cacheprovider > "$OUT/gpu_tests.log" 2>&1; tail -2 "$OUT/gpu_tests.log"
  timeout 120 python3 benchmarks/gpu_launcher.py --out "$OUT/launcher.json" > "$OUT/launcher.log" 2>&1; tail -10 "$OUT/launcher.log"
  timeout 40 python3 benchmarks/gpu_hostcost.py --out "$OUT/hostcost.json" > /dev/null 2>&1
  for c in wgrad_shapes wgrad_shapes_unseen; do
    timeout 150 python3 -m skwgrad run-from-cache --corpus tests/data/$c.csv --verify --bench --baseline cudnn --iters 30 \
      --out "$OUT/rfc_$c.json" > "$OUT/rfc_$c.log" 2>&1; echo "rfc $c rc=$?"; tail -3 "$OUT/rfc_$c.log"
  done
  rm -rf /tmp/t1 /tmp/t2
  python3 -m skwgrad cache import .device/f.tar.xz --cache /tmp/t1 > "$OUT/tune.log" 2>&1
  timeout 100 python3 benchmarks/gpu_tune_first_use.py first --cache /tmp/t1 --out "$OUT/tune_first.json" >> "$OUT/tune.log" 2>&1
  python3 -m skwgrad cache export /tmp/tuned.tar --cache /tmp/t1 >> "$OUT/tune.log" 2>&1
  python3 -m skwgrad cache import /tmp/tuned.tar --cache /tmp/t2 >> "$OUT/tune.log" 2>&1
  timeout 60 python3 benchmarks/gpu_tune_first_use.py second --cache /tmp/t2 --out "$OUT/tune_second.json" --against "$OUT/tune_first.json" >> "$OUT/tune.log" 2>&1
  tail -2 "$OUT/tune.log"
  mkdir -p .device && tar -C .device -xJf .device/dw.tar.xz
  timeout 200 python3 benchmarks/gpu_depthwise.py run --kernels .device/dwkernels --out "$OUT/depthwise.json" --budget-s 150 > "$OUT/depthwise.log" 2>&1
  tail -30 "$OUT/depthwise.log"
  ;;
torch)
  # opcheck, ResNet-50 and MobileNetV2 eager (grads, fallbacks per layer, backward time auto and
  # tuned), then the 100-step CUDA-graph check with its control; phases stop starting at 235 s.
  timeout 300 python3 benchmarks/gpu_torch_model.py --out "$OUT/torch_model.json" --budget-s 235 > "$OUT/torch_model.log" 2>&1
  echo "torch_model rc=$?"; tail -60 "$OUT/torch_model.log"
  ;;
esac
