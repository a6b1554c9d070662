"""`kernel-archive explore`: bad sources are one line + exit 2; good ones start streamlit with the source."""

from __future__ import annotations

import os
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


def test_launch_serves_the_checked_archive_in_process(synthetic_dir, monkeypatch):
    from streamlit.web import cli as streamlit_cli

    from explorer import preload

    seen = {}

    def fake_main(args, prog_name, standalone_mode):
        spec = os.environ[config.EXPLORER_SOURCE_ENV]
        seen.update(args=args, spec=spec, handed_over=preload.take(spec))

    monkeypatch.setattr(streamlit_cli, "main", fake_main)
    monkeypatch.delenv(config.EXPLORER_SOURCE_ENV, raising=False)
    explore_cli.explore(str(synthetic_dir), port=8599, address="127.0.0.1", check_only=False)
    args = seen["args"]
    assert args[:2] == ["run", str(config.REPO_ROOT / "explorer" / "app.py")]
    assert args[args.index("--server.port") + 1] == "8599" and args[args.index("--server.headless") + 1] == "true"
    assert seen["spec"] == str(synthetic_dir)
    # The app takes the archive the check opened (once) instead of reading the Parquet files again.
    assert seen["handed_over"] is not None and seen["handed_over"].size == 300
    assert preload.take(seen["spec"]) is None


def test_missing_source_raises_usage_error(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        explore_cli.explore(str(tmp_path / "nope"), port=8599, address="127.0.0.1", check_only=True)


def test_launch_refuses_an_empty_source_before_serving(synthetic_dir, tmp_path, monkeypatch):
    from streamlit.web import cli as streamlit_cli

    first = sorted(synthetic_dir.glob("data/*.parquet"))[0]
    pq.write_table(pq.read_schema(first).empty_table(), tmp_path / "empty.parquet")
    monkeypatch.setattr(streamlit_cli, "main", lambda **_: pytest.fail("served an empty source"))
    with pytest.raises(UsageError, match="holds no kernel records"):
        explore_cli.explore(str(tmp_path / "empty.parquet"), port=8599, address="127.0.0.1", check_only=False)


def test_a_failed_background_open_reaches_the_terminal_and_the_page(synthetic_dir, tmp_path, capsys):
    from builder.errors import ArchiveError
    from explorer import preload
    from explorer.sources import resolve_source

    resolved = resolve_source(str(synthetic_dir))
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    for f in resolved.files:  # right footers (the launch check passes), data pages overwritten
        data = bytearray(f.read_bytes())
        data[4 : len(data) // 2] = b"\0" * (len(data) // 2 - 4)
        (damaged / f.name).write_bytes(bytes(data))
    broken = resolve_source(str(damaged))
    assert broken.count_records() == resolved.count_records()
    preload.open_in_background("damaged-spec", broken).exception(timeout=60)
    with pytest.raises(ArchiveError, match="cannot"):
        preload.take("damaged-spec")
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    assert preload.take("damaged-spec") is None  # taken once; the page then opens (and reports) by itself
