"""`kernel-archive tasks` over the built-in suite and external KernelBench-style checkouts, and the
one-line errors (exit 2) for suites that cannot be used."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from builder.cli import main
from builder.errors import ExitCode, UsageError
from builder.tasks import instantiate, load_suite, load_task_module

MODULE_ONLY_TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(8, 8)]


def get_init_inputs():
    return []
"""

FUNCTIONAL_TASK = """
import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "gemm_epilogue"


def module_fn(x, weight, bias):
    return torch.tanh(F.linear(x, weight, bias))


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))
        self.bias = nn.Parameter(torch.randn(n))

    def forward(self, x, fn=module_fn):
        return fn(x, self.weight, self.bias)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return [8]
"""


def run_cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """Run the real console entry point in-process; returns (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["kernel-archive", *args])
    with pytest.raises(SystemExit) as exited:
        main()
    captured = capsys.readouterr()
    code = exited.value.code
    return (0 if code is None else int(code)), captured.out, captured.err


def write_suite(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def test_builtin_listing_as_json(monkeypatch, capsys):
    code, out, err = run_cli(monkeypatch, capsys, "tasks", "--json")
    assert code == 0, err
    listed = json.loads(out)
    assert len(listed) >= 58
    assert {entry["level"] for entry in listed} == {1, 2, 3}
    for entry in listed:
        assert entry["id"] == f"{entry['level']}/{entry['number']}"
        assert entry["name"] and entry["functional"] is True
    assert len({entry["id"] for entry in listed}) == len(listed)


def test_level_filter_and_table(monkeypatch, capsys):
    code, out, _ = run_cli(monkeypatch, capsys, "tasks", "--level", "3", "--json")
    assert code == 0
    assert {entry["level"] for entry in json.loads(out)} == {3}
    code, out, _ = run_cli(monkeypatch, capsys, "tasks", "--level", "2")
    assert code == 0
    assert "gemm_bias_relu" in out and "2/1" in out


def test_external_suite_with_and_without_functional_form(tmp_path, monkeypatch, capsys):
    suite = write_suite(
        tmp_path / "KernelBench",
        {"level1/1_relu_module_only.py": MODULE_ONLY_TASK, "level2/3_linear_tanh.py": FUNCTIONAL_TASK},
    )
    code, out, err = run_cli(monkeypatch, capsys, "tasks", "--suite", str(suite), "--json")
    assert code == 0, err
    listed = {entry["id"]: entry for entry in json.loads(out)}
    assert set(listed) == {"1/1", "2/3"}
    assert listed["1/1"]["functional"] is False and listed["1/1"]["category"] == "other"
    assert listed["2/3"]["functional"] is True and listed["2/3"]["category"] == "gemm_epilogue"
    task = load_suite(suite).get("2/3")
    assert "def module_fn" in task.functional_source()
    model, inputs = instantiate(load_task_module(task), seed=0)
    assert model(*inputs).shape == (4, 8)


@pytest.mark.parametrize(
    "files, expected",
    [
        ({"level1/1_broken.py": "def module_fn(:\n"}, "1_broken.py: syntax error"),
        ({"level1/1_no_model.py": "def get_inputs():\n    return []\n"}, "1_no_model.py: not a task file"),
        ({"level1/helper.py": FUNCTIONAL_TASK}, "helper.py: task files must be named N_name.py"),
        ({"level1/1_a.py": FUNCTIONAL_TASK, "level1/01_b.py": FUNCTIONAL_TASK}, "task id 1/1 already used"),
        ({"level1/1_a.py": "TOLERANCE = 1e-3 * 2\n" + FUNCTIONAL_TASK}, "TOLERANCE must be a literal value"),
        ({"notes/readme.py": ""}, "no level folders"),
    ],
    ids=["syntax-error", "missing-model", "bad-file-name", "duplicate-id", "non-literal-metadata", "no-levels"],
)
def test_unusable_suite_is_a_one_line_usage_error(tmp_path, monkeypatch, capsys, files, expected):
    suite = write_suite(tmp_path / "suite", files)
    code, out, err = run_cli(monkeypatch, capsys, "tasks", "--suite", str(suite))
    assert code == ExitCode.USAGE
    assert out == ""
    assert err.startswith("error: ") and expected in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_unknown_suite_path_from_the_console_script(tmp_path):
    """One real subprocess through the installed entry point, as a user would run it."""
    missing = tmp_path / "does-not-exist"
    result = subprocess.run(
        [sys.executable, "-c", "from builder.cli import main; main()", "tasks", "--suite", str(missing)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == ExitCode.USAGE
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"error: task suite not found: {missing} (expected folders level1/, level2/, ...)"
    ]


def test_empty_level_and_bad_pattern_are_usage_errors(monkeypatch, capsys):
    code, _, err = run_cli(monkeypatch, capsys, "tasks", "--level", "7")
    assert code == 2 and "no tasks at level 7" in err and "levels there: 1, 2, 3" in err
    with pytest.raises(UsageError, match="not a valid regular expression"):
        load_suite().select(pattern="(")
