#!/usr/bin/env bash
# One GPU-box run of the verdict checks of a KernelBench ModelNew with parameters, side streams and the runtime
# floor: their in-process GPU tests, the CLI verdicts of their CUDA fixtures, and the KernelBench-layout generation
# folder re-verified beside KernelBench's correctness protocol. PART=tests|fixtures|generation runs one part.
source benchmarks/device/setup.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.memory --format=csv | tee "$OUT/gpu.txt"
if [ "${PART:-tests}" = tests ]; then
  python3 -m pytest -q -m gpu -p no:cacheprovider -rs -s tests/builder/verify/test_model_new_gpu.py \
    tests/builder/verify/test_stream_order_gpu.py tests/builder/verify/test_checks_gpu.py \
    tests/builder/verify/test_floor.py 2>&1 | tee "$OUT/verdict-tests.log" | tail -n 60
fi
if [ "${PART:-}" = fixtures ]; then
  for spec in cuda/incorrect_side_stream_short_nonblocking.cu:1/4 cuda/incorrect_side_stream_short_pool.cu:1/1 \
      cuda/incorrect_side_stream_per_thread.cu:1/1 cuda/incorrect_side_stream.cu:1/1 cuda/correct_side_stream_joined.cu:1/1 \
      cuda/correct_scale_shift_legacy_stream.cu:1/1 cuda/correct_fused_fast.cu:1/4 \
      cuda/correct_model_new_own_parameters.py:1/1 cuda/correct_model_new_reordered_parameters.py:1/1 \
      cuda/correct_model_new_linear.py:1/5 cuda/correct_model_new_conv_batchnorm.py:1/6 \
      cuda/incorrect_model_new_bias_misused.py:1/5; do
    python3 -m builder verify "tests/fixtures/candidates/${spec%%:*}" --task "${spec##*:}" --suite tests/fixtures/tasks \
      --backend cuda --json 2>>"$OUT/fixtures.err" | grep '^{' | python3 -c "import json, sys; r = json.loads(sys.stdin.read()); \
print('${spec%%:*}', r['status'], r['flags'], 'runtime', r['runtime_ms'], 'floor', r['floor_ms'], 'sol', r['speed_of_light'], \
'loaded', r['reference_state_loaded'], (r['error'] or '')[:160])" | tee -a "$OUT/fixtures.log"
  done
fi
if [ "${PART:-}" = generation ]; then
  python3 -m builder reverify tests/fixtures/kernelbench_generation --out "$OUT/kb" --backend cuda --quiet
  python3 benchmarks/kernelbench_protocol.py tests/fixtures/kernelbench_generation --device cuda --reverify "$OUT/kb" \
    --json "$OUT/kb/protocol.json"
fi
