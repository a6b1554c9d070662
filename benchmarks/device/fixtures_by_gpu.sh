#!/usr/bin/env bash
# The CUDA adversarial fixtures one by one through `kernel-archive verify` (test_cuda_fixture_verdict), split
# between the visible GPUs: the fixtures' node ids dealt out in turn, one pytest a GPU, each on an even slice of
# the cores (each pytest session builds into a cache of its own). Logs under $OUT (fixtures-GPU.log);
# TEST_BUDGET_S bounds each; FIXTURES_K (a pytest -k expression) narrows the fixtures.
source benchmarks/device/setup.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
cores=$(nproc); per=$(( cores / gpus ))
python3 -m pytest -q -m gpu -p no:cacheprovider --collect-only tests/builder/verify/test_adversarial.py \
  -k "test_cuda_fixture_verdict and not stream and not work_queues${FIXTURES_K:+ and ($FIXTURES_K)}" \
  | grep "::" > "$OUT/fixture-ids.txt"
echo "$(wc -l < "$OUT/fixture-ids.txt") fixtures over $gpus GPUs, $per cores each"
for g in $(seq 0 $(( gpus - 1 ))); do
  mapfile -t ids < <(awk -v n="$gpus" -v g="$g" '(NR - 1) % n == g' "$OUT/fixture-ids.txt")
  [ ${#ids[@]} -gt 0 ] || continue
  CUDA_VISIBLE_DEVICES=$g timeout "${TEST_BUDGET_S:-540}" \
    taskset -c $(( g * per ))-$(( g * per + per - 1 )) python3 -m pytest -q -m gpu -p no:cacheprovider -rs "${ids[@]}" \
    > "$OUT/fixtures-$g.log" 2>&1 &
done
wait
for g in $(seq 0 $(( gpus - 1 ))); do
  echo "== GPU $g"; grep -E "passed|failed|FAILED|ERROR" "$OUT/fixtures-$g.log" | tail -n 12
done
