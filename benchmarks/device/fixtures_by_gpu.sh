#!/usr/bin/env bash
# The CUDA adversarial fixtures one by one through `kernel-archive verify` (test_cuda_fixture_verdict), split
# between the visible GPUs: the fixtures' node ids dealt out in turn, each GPU running its own one after another
# on an even slice of the cores, a pytest session each (the session verifies its fixtures before it reports any,
# so one session a fixture keeps what finished when the limit comes). Logs under $OUT (fixtures-GPU.log);
# TEST_BUDGET_S bounds each GPU's share (a .cu fixture takes about 100 s on a busy 16-core slice); FIXTURES_K (a
# pytest -k expression) narrows the fixtures.
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
  (
    deadline=$(( $(date +%s) + ${TEST_BUDGET_S:-540} ))
    for id in "${ids[@]}"; do
      left=$(( deadline - $(date +%s) ))
      [ "$left" -gt 0 ] || { echo "not run (time): $id"; continue; }
      CUDA_VISIBLE_DEVICES=$g timeout "$left" taskset -c $(( g * per ))-$(( g * per + per - 1 )) \
        python3 -m pytest -q -m gpu -p no:cacheprovider -rs "$id" || echo "exit $?: $id"
    done
  ) > "$OUT/fixtures-$g.log" 2>&1 &
done
wait
for g in $(seq 0 $(( gpus - 1 ))); do
  echo "== GPU $g"; grep -E "passed|failed|FAILED|ERROR|^not run|^exit" "$OUT/fixtures-$g.log" | tail -n 20
done
