#!/usr/bin/env bash
# When a cold `kernel-archive build` (the bundled suite, CUDA, its defaults) stores its first records, in the two
# orders of the control kernel, each on a fresh cache and stopped after BUDGET_S seconds:
#   stream:    the design, the control kernel leading the first stream (builder/pipeline/control_gate.py);
#   preflight: the control kernel alone first (`preflight.preflight`, timed), then the build, which finds its pass.
# progress.json is sampled every 0.5 s; benchmarks/build_start_figures.py reads the samples under $OUT.
source benchmarks/device/setup.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; BUDGET_S=${BUDGET_S:-150}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
echo "cores: $(nproc)" | tee -a "$OUT/gpu.txt"
for order in ${ORDERS:-stream preflight}; do
  export KA_CACHE_DIR=/opt/ka-cache-$order
  build=/opt/ka-build-$order
  rm -rf "$KA_CACHE_DIR" "$build"
  began=$(date +%s.%N)
  if [ "$order" = preflight ]; then
    python3 -c "from builder.pipeline.engine_access import make_verify_options
from builder.verify.engine.verifier import Verifier
Verifier(make_verify_options('cuda', [0])).preflight()" > "$OUT/preflight-alone.log" 2>&1
    echo "preflight alone: exit $?, $(python3 -c "import time; print(round(time.time() - $began, 1))") s" | tee -a "$OUT/preflight-alone.log"
  fi
  timeout -s TERM -k 30 "$(python3 -c "print(max(1, round($BUDGET_S - ($(date +%s.%N) - $began))))")" \
    python3 -m builder build --out "$build" --generator bundled --backend cuda --quiet > "$OUT/build-$order.log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    [ -f "$build/progress.json" ] && echo "$(date +%s.%N) $began $(cat "$build/progress.json")" >> "$OUT/progress-$order.log"
    sleep 0.5
  done
  wait "$pid"; echo "build ($order) exit $?" | tee -a "$OUT/build-$order.log"
  ls "$KA_CACHE_DIR/preflight" | sed "s/^/preflight pass remembered ($order): /"
  cp "$build/archive.duckdb" "$OUT/archive-$order.duckdb" 2>/dev/null
done
python3 benchmarks/build_start_figures.py "$OUT"/progress-*.log | tee "$OUT/figures.txt"
