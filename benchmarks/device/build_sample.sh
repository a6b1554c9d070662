#!/usr/bin/env bash
# One GPU-box run of the sample-archive build: resumes the build carried in .carry/gpu-build (if any),
# runs the bundled generator on CUDA for LEVELS within BUDGET_S seconds (SIGTERM then: records already
# committed stay), and returns the DuckDB store, status and logs through $OUT.
# The GPU box's copy of the tree has no .git: pass the commit so records name their code, e.g.
#   KA_BUILDER_COMMIT=$(git rev-parse HEAD)$(git diff --quiet HEAD || echo .dirty) (run here, pasted into the call).
source benchmarks/device/setup.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" builds/gpu
[ -f .carry/gpu-build/archive.duckdb ] && cp .carry/gpu-build/archive.duckdb* builds/gpu/
export KA_CACHE_DIR=/opt/ka-cache
start=$(date +%s)
timeout -s TERM -k 30 "${BUDGET_S:-500}" python3 -m builder build --out builds/gpu --generator bundled --backend cuda \
  --levels "${LEVELS:-1,2,3}" ${TASKS:+--tasks "$TASKS"} --quiet > "$OUT/build.log" 2>&1
echo "build exit $? after $(( $(date +%s) - start )) s"
tail -n 30 "$OUT/build.log"
python3 -m builder status builds/gpu 2>&1 | tee "$OUT/status.txt" | tail -n 40
cp builds/gpu/archive.duckdb* "$OUT/" 2>/dev/null; ls -la "$OUT"
