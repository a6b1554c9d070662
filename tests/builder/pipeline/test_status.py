"""`kernel-archive status`: counts, runs, remaining; locked and malformed build dirs."""

from __future__ import annotations

import json

from pipeline_helpers import run_cli

from builder import config
from builder.pipeline.status import read_status
from builder.pipeline.store import Store, db_path


def test_status_counts_by_level_and_status(fake_build):
    report = read_status(fake_build)
    with Store.open_existing(fake_build) as store:
        expected = dict(
            ((lvl, s), n)
            for lvl, s, n in store.con.execute("SELECT level, status, count(*) FROM records GROUP BY ALL").fetchall()
        )
    assert report.by_level_status == expected and report.total == sum(expected.values()) > 0
    assert report.builds[-1]["state"] == "finished"
    assert report.throughput_per_hour() is not None
    done = run_cli("status", fake_build)
    assert done.returncode == 0, done.stderr
    assert f"{report.total} record(s)" in done.stdout and "run 1: finished" in done.stdout


def test_status_of_missing_or_malformed_dir_is_one_line_exit_2(tmp_path):
    for target in (tmp_path / "absent", tmp_path):
        done = run_cli("status", target)
        assert done.returncode == 2 and done.stderr.startswith("error: ") and len(done.stderr.strip().splitlines()) == 1
    db_path(tmp_path).write_bytes(b"\x00garbage" * 100)
    done = run_cli("status", tmp_path)
    assert done.returncode == 2 and "not a readable build database" in done.stderr


def test_status_while_a_build_holds_the_database_reads_the_progress_snapshot(tmp_path):
    store = Store.open(tmp_path)  # this process now holds DuckDB's write lock, as a running build does
    try:
        snapshot = {
            "state": "running",
            "pid": 4242,
            "stored": 7,
            "in_flight": 2,
            "remaining": 5,
            "kernels_per_hour": 90.0,
            "by_status": {"correct": 7},
        }
        (tmp_path / config.BUILD_PROGRESS_NAME).write_text(json.dumps(snapshot))
        done = run_cli("status", tmp_path)
    finally:
        store.close()
    assert done.returncode == 0, done.stderr
    assert "build running (pid 4242): 7 stored" in done.stdout and "5 remaining" in done.stdout
