"""`kernel-archive verify`: usage errors are one line with exit 2; a produced record means exit 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from builder import config

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "sandbox"
CLI = "from builder.cli import main; main()"


def run_cli(*args: str, timeout: float = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CLI, "verify", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=config.REPO_ROOT, env=env)  # fmt: skip


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["missing_kernel.cpp", "--task", "1/1"], "candidate file not found"),
        ([str(FIXTURES / "add_one.cpp"), "--task", "9/99"], "unknown task"),
        ([str(FIXTURES / "fake_child.py"), "--task", "nonsense"], "unknown task"),
        ([str(FIXTURES / "README.md"), "--task", "1/1"], ".cu"),
        ([str(FIXTURES / "add_one.cpp"), "--task", "1/1", "--backend", "tpu"], "--backend"),
        ([str(FIXTURES / "add_one.cpp"), "--task", "1/1", "--timeout", "0"], "--timeout"),
    ],
)
def test_usage_errors_are_one_line_with_exit_2(args, fragment):
    done = run_cli(*args, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0]
    assert "Traceback" not in done.stderr and done.stdout == ""


@pytest.mark.slow  # a whole CLI verification (~35 s)
def test_json_record_for_an_incorrect_model_new_exits_0_without_the_builders_secrets(tmp_path):
    quoted = "return torch.zeros"  # a key that the candidate's source holds, as its record does
    done = run_cli(str(FIXTURES / "zeros_model_new.py"), "--task", "1/1", "--backend", "cpu", "--json",
                   "--trials", "2", "--timeout", "300", env={**os.environ, "EXAMPLE_API_KEY": quoted})  # fmt: skip
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)  # exactly one JSON object on stdout
    assert quoted not in done.stdout and "[redacted]" in record["cuda_code"]
    for key in ("status", "flags", "error", "max_diff", "runtime_ms", "eager_ms", "compile_ms", "speedup_eager",
                "speedup_compile", "isolation", "kernel_id"):  # fmt: skip
        assert key in record
    assert record["status"] == "incorrect" and record["language"] == "python" and record["max_diff"] > 0
    assert len(record["seeds"]) == 2 and record["isolation"] in ("bwrap", "process")
