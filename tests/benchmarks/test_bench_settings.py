"""The throughput bench over several settings (`--eval-workers 1,2`): each setting a cold pass of its own, and
whether each later pass judged the kernels as the first one did."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_each_later_setting_is_compared_kernel_by_kernel_with_the_first(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_verify_throughput.py"), "--backend", "cpu", "--kernels",
         "2", "--tasks", "1", "--eval-workers", "1,2", "--skip", "startup,compile"],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-2000:]
    assert "eval workers/device 1: wall s" in output and "eval workers/device 2: wall s" in output
    assert "eval workers/device 2: workers as the engine fixed them: 2 evaluation a device" in output
    agreement = dict(re.findall(r"^pass 2 \(eval workers/device 2\) against pass 1: (.+?)\s+(-?[\d.]+|nan)$",
                                output, re.MULTILINE))  # fmt: skip
    assert float(agreement["kernels in both passes"]) == 2, output[-2000:]
    assert float(agreement["same status and flags"]) == 2  # the same kernels, judged alike by either setting
    assert not re.search(r"^pass 1 .* against pass 1", output, re.MULTILINE)  # the first is not held against itself
