#!/usr/bin/env bash
# One GPU-box run of throughput work: the GPU tests in GPU_TESTS (if any; PYTEST_K selects among them), the child
# start-up bench (CHILD_START=0 skips it), then bench_verify_throughput.py with BENCH_ARGS, sent SIGTERM after BENCH_BUDGET_S seconds (its
# figures then count the records it made). Logs under $OUT.
source benchmarks/device/setup.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
echo "cores: $(nproc)"
if [ -n "${GPU_TESTS:-}" ]; then
  timeout "${TEST_BUDGET_S:-300}" python3 -m pytest -q -m gpu -p no:cacheprovider -rs --durations=10 $GPU_TESTS ${PYTEST_K:+-k "$PYTEST_K"} \
    > "$OUT/gpu-tests.log" 2>&1
  grep -E "passed|failed|error|FAILED|ERROR|SKIPPED|s call" "$OUT/gpu-tests.log" | tail -n 40
fi
if [ "${CHILD_START:-1}" = 1 ]; then
  timeout 150 python3 benchmarks/bench_child_start.py --children "${CHILDREN:-4}" > "$OUT/child-start.log" 2>&1
  tail -n 20 "$OUT/child-start.log"
fi
if [ -n "${BENCH_ARGS:-}" ]; then
  timeout -s TERM -k 30 "${BENCH_BUDGET_S:-400}" python3 benchmarks/bench_verify_throughput.py $BENCH_ARGS --records "$OUT/records.jsonl" \
    > "$OUT/bench.log" 2>&1
  grep -vE "^build of " "$OUT/bench.log" | tail -n 90
fi
