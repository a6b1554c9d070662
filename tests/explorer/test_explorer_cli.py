"""`kernel-archive explore`: bad sources are one line + exit 2; good ones start streamlit with the source."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from builder import config
from builder.cli import explore as explore_cli
from builder.errors import UsageError


def _cli(*args: str) -> subprocess.CompletedProcess:
    code = "from builder.cli import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, "explore", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=config.REPO_ROOT,
    )


def test_wrong_schema_is_one_line_and_exit_2(tmp_path):
    pq.write_table(pa.table({"x": [1]}), tmp_path / "t.parquet")
    result = _cli(str(tmp_path / "t.parquet"), "--check")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "missing required column" in lines[0]
    assert "Traceback" not in result.stderr


def test_check_reports_the_source(synthetic_dir, capsys):
    explore_cli.explore(str(synthetic_dir), port=8599, address="127.0.0.1", check_only=True)
    assert "300 kernels (synthetic archive" in capsys.readouterr().err


def test_launch_passes_the_source_to_streamlit(synthetic_dir, monkeypatch):
    seen = {}

    def fake_run(argv, env, cwd):
        seen.update(argv=argv, env=env)
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(explore_cli.subprocess, "run", fake_run)
    explore_cli.explore(str(synthetic_dir), port=8599, address="127.0.0.1", check_only=False)
    argv = seen["argv"]
    assert argv[1:4] == ["-m", "streamlit", "run"] and argv[4] == str(config.REPO_ROOT / "explorer" / "app.py")
    assert argv[argv.index("--server.port") + 1] == "8599" and argv[argv.index("--server.headless") + 1] == "true"
    assert seen["env"][config.EXPLORER_SOURCE_ENV] == str(synthetic_dir)


def test_missing_source_raises_usage_error(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        explore_cli.explore(str(tmp_path / "nope"), port=8599, address="127.0.0.1", check_only=True)
