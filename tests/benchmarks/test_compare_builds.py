"""compare_builds.py: two real stores, record against record."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from builder.candidates import Candidate
from builder.pipeline.store import Store
from builder.tasks import load_suite
from tests.builder.generate.helpers import make_record

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "compare_builds.py"


def store_with(build_dir: Path, rows: list[tuple[str, str, float | None, list[str]]]) -> None:
    """rows: (kernel source tag, status, speedup over eager, flags), all on task 1/1."""
    task = load_suite().get("1/1")
    with Store.open(build_dir) as store:
        for tag, status, speedup, flags in rows:
            candidate = Candidate(task_id=task.id, source=f"// kernel {tag}\n", language="cpp", kernel_name=tag,
                                  generator="bundled")  # fmt: skip
            store.add_record(make_record(candidate, task, status, speedup_eager=speedup, flags=flags))


def run(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=120)


def test_agreeing_builds_report_every_pair_the_same(tmp_path):
    rows = [("a", "correct", 2.0, []), ("b", "incorrect", None, []), ("c", "correct", 1.0, ["side_stream"])]
    store_with(tmp_path / "one", rows)
    store_with(tmp_path / "two", [("a", "correct", 2.08, []), *rows[1:]])
    result = run(tmp_path / "one", tmp_path / "two", "--json", tmp_path / "cmp.json")
    assert result.returncode == 0, result.stderr
    assert "records in both: 3" in result.stdout
    assert "same status: 3 of 3; same flags where the status agrees: 3" in result.stdout
    assert "correct in both: 2; speedups over eager within 5%: 2, largest gap 4.0%" in result.stdout
    assert (tmp_path / "cmp.json").is_file()


def test_differences_are_named_pair_by_pair(tmp_path):
    store_with(tmp_path / "one", [("a", "correct", 2.0, []), ("b", "correct", 1.0, []), ("c", "correct", 1.0, []),
                                  ("d", "incorrect", None, [])])  # fmt: skip
    store_with(tmp_path / "two", [("a", "correct", 2.5, []), ("b", "incorrect", None, []),
                                  ("c", "correct", 1.0, ["side_stream"]), ("e", "correct", 1.0, [])])  # fmt: skip
    result = run(tmp_path / "one", tmp_path / "two")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "only in the first: 1, only in the second: 1" in out
    assert "same status: 2 of 3; same flags where the status agrees: 1" in out
    assert "correct in both: 2; speedups over eager within 5%: 1, largest gap 25.0%" in out
    assert out.count("status differs: 1/1:") == 1 and out.count("flags differ: 1/1:") == 1
    assert out.count("speedups outside: 1/1:") == 1


def test_a_directory_without_a_build_is_a_one_line_usage_error(tmp_path):
    store_with(tmp_path / "one", [("a", "correct", 2.0, [])])
    result = run(tmp_path / "one", tmp_path / "missing")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "no such build directory" in result.stderr
