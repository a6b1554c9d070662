#!/usr/bin/env bash
# One GPU-box run: every GPU-marked test of the engine, profiler and task suite, plus a real ncu capture.
source benchmarks/device/setup.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
timeout ${TEST_BUDGET_S:-420} python3 -m pytest -q -m gpu -p no:cacheprovider --durations=25 -rs -s \
  ${GPU_TESTS:-tests/builder/verify tests/builder/profile tests/builder/tasks} ${PYTEST_ARGS:-} 2>&1 | tee "$OUT/gpu-tests.log" | grep -vE "^\s*$" | tail -n 150
[ "${NCU_SAMPLE:-1}" = 0 ] && exit 0
python3 - <<'PY' > /tmp/ncu_sample.py
print("import torch\na=torch.randn(4096,4096,device='cuda')\nb=(a*2).sum()\nc=a@a\ntorch.cuda.synchronize()")
PY
ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
  --section ComputeWorkloadAnalysis --launch-count 3 -f -o "$OUT/ncu_sample" python3 /tmp/ncu_sample.py > "$OUT/ncu-run.log" 2>&1
ncu --import "$OUT/ncu_sample.ncu-rep" --csv --page details --print-units base > "$OUT/ncu_details.csv" 2>&1
echo "ncu csv lines: $(wc -l < "$OUT/ncu_details.csv")"
