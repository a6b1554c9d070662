#!/usr/bin/env bash
# `--executor ray` against `--executor local` on one GPU machine, the same bundled candidates (TASKS), each build
# from an empty compile cache, ncu off; then benchmarks/compare_builds.py on the two. Needs Ray carried
# (fetch_carry.sh WITH_RAY=1). RAY_BUDGET_S / LOCAL_BUDGET_S: SIGTERM after that many seconds (the build then
# records what it made). Logs and both builds' stores under $OUT.
source benchmarks/device/setup.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
TASKS=${TASKS:-'^(1/[1-5]|2/[1-4]|3/[1-2])$'}
nvidia-smi --query-gpu=name,driver_version --format=csv | tee "$OUT/gpu.txt"
echo "cores: $(nproc)"
python3 -c "import ray; print('ray', ray.__version__)"
timed_build() {  # NAME EXECUTOR BUDGET
  local started=$(date +%s.%N)
  KA_CACHE_DIR=/tmp/cache-$1 timeout -s TERM -k 30 "$3" python3 -m builder build --out /tmp/b-$1 --generator bundled \
    --tasks "$TASKS" --no-profile --executor "$2" > "$OUT/build-$1.log" 2>&1
  echo "$1: exit $? after $(python3 -c "import time; print(round(time.time() - $started, 1))") s"
  mkdir -p "$OUT/b-$1" && cp /tmp/b-$1/archive.duckdb /tmp/b-$1/progress.json "$OUT/b-$1/" 2>/dev/null
  tail -n 5 "$OUT/build-$1.log"
}
for order in ${ORDER:-ray local}; do
  case $order in
    ray) timed_build ray ray "${RAY_BUDGET_S:-280}" ;;
    local) timed_build local local "${LOCAL_BUDGET_S:-260}" ;;
  esac
done
python3 benchmarks/compare_builds.py /tmp/b-local /tmp/b-ray | tee "$OUT/compare.txt" | tail -n 30
python3 -m builder status /tmp/b-ray | tee "$OUT/status-ray.txt" | head -n 30
