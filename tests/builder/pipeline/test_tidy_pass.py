"""`kernel-archive tidy`: clang-tidy filled in, after the build, for records built without it."""

from __future__ import annotations

import json

import pytest
from pipeline_helpers import run_cli
from test_store import make_record

from builder.pipeline import tidy_pass
from builder.pipeline.store import Store
from builder.profile.clang_tidy import CLANG_TIDY_MISSING
from builder.tasks import load_suite

# Plain C++ (no torch headers) keeps each clang-tidy run under a second; the branch clone is a real finding.
CPP_WITH_FINDING = """\
int pick(int a) {
  if (a > 0) {
    return 1;
  } else {
    return 1;
  }
}
"""


@pytest.fixture
def build_dir(tmp_path):
    task = load_suite().get("1/1")
    missing = json.dumps({"error": CLANG_TIDY_MISSING})
    with Store.open(tmp_path) as store:
        store.add_record(make_record(task, CPP_WITH_FINDING, kernel_id="needs", clang_tidy=missing))
        store.add_record(make_record(task, "int ok() { return 0; }\n", kernel_id="never", clang_tidy=None))
        done = json.dumps({"tool": "clang-tidy", "warnings": 0, "diagnostics": []})
        store.add_record(make_record(task, "int f();\n", kernel_id="done", clang_tidy=done, clang_tidy_warnings=0))
        store.add_record(
            make_record(task, "class ModelNew: pass\n", kernel_id="python", language="python", clang_tidy=missing)
        )
        timed_out = json.dumps({"error": "clang-tidy timed out after 300 s"})
        store.add_record(make_record(task, "int g();\n", kernel_id="timed_out", clang_tidy=timed_out))
    return tmp_path


def stored(build_dir, kernel_id):
    with Store.open_existing(build_dir) as store:
        return store.con.execute(
            "SELECT clang_tidy, clang_tidy_warnings FROM records WHERE kernel_id = ?", [kernel_id]
        ).fetchone()


def test_only_sources_clang_tidy_never_read_are_pending(build_dir):
    with Store.open_existing(build_dir) as store:
        assert sorted(job.kernel_id for job in tidy_pass.pending_jobs(store)) == ["needs", "never"]
        redo = sorted(job.kernel_id for job in tidy_pass.pending_jobs(store, redo=True))
    assert redo == ["done", "needs", "never", "timed_out"]  # python sources are never clang-tidy's


def test_tidy_fills_the_fields_and_a_rerun_has_nothing_left(build_dir):
    summary = tidy_pass.run(build_dir, workers=2)
    assert (summary.pending, summary.updated, summary.failed) == (2, 2, 0)
    text, warnings = stored(build_dir, "needs")
    result = json.loads(text)
    assert result["tool"] == "clang-tidy" and warnings == result["warnings"] >= 1
    assert any(d["check"] == "bugprone-branch-clone" and d["line"] == 2 for d in result["diagnostics"])
    assert stored(build_dir, "never")[1] == 0
    assert stored(build_dir, "timed_out") == (json.dumps({"error": "clang-tidy timed out after 300 s"}), None)
    assert tidy_pass.run(build_dir).pending == 0
    done = run_cli("tidy", build_dir)
    assert done.returncode == 0 and "clang-tidy results already" in done.stdout


def test_tidy_of_a_missing_build_dir_is_one_line_exit_2(tmp_path):
    done = run_cli("tidy", tmp_path / "absent")
    assert done.returncode == 2 and done.stderr.startswith("error: ") and len(done.stderr.strip().splitlines()) == 1


def test_update_fields_refuses_identity_and_unknown_columns(build_dir):
    with Store.open_existing(build_dir, read_only=False) as store:
        assert store.update_fields("1/1", "needs", {"clang_tidy_warnings": 3}) is True
        assert store.update_fields("1/1", "absent", {"clang_tidy_warnings": 3}) is False
        with pytest.raises(ValueError, match="identity"):
            store.update_fields("1/1", "needs", {"kernel_id": "x"})
        with pytest.raises(ValueError, match="not record fields"):
            store.update_fields("1/1", "needs", {"nonsense": 1})


def write_export(folder, rows):
    """A dataset folder with the columns `--reuse` reads (an export's default config has them all)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (folder / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), folder / "data" / "level_1-00000-of-00001.parquet")
    return folder


def test_reuse_takes_identical_analyses_and_analyses_the_rest(build_dir, tmp_path):
    from builder import config
    from builder.profile.clang_tidy import clang_tidy_version

    def analysis(version, warnings):
        return json.dumps(
            {"tool": "clang-tidy", "version": version, "arch": None, "checks": config.CLANG_TIDY_CHECKS,
             "warnings": warnings, "diagnostics": [{"check": "taken-from-the-export", "line": 1}]}
        )  # fmt: skip

    def row(source, text, warnings):
        return {"language": "cpp", "cuda_code": source, "compute_capability": "9.0", "clang_tidy": text,
                "clang_tidy_warnings": warnings}  # fmt: skip

    dataset = write_export(
        tmp_path / "export",
        [
            row(CPP_WITH_FINDING, analysis(clang_tidy_version(), 7), 7),  # same source, same tool: reused
            row("int ok() { return 0; }\n", analysis("0.0.1", 5), 5),  # another clang-tidy: analysed again
            row("int g();\n", json.dumps({"error": "clang-tidy timed out after 300 s"}), None),
        ],
    )
    summary = tidy_pass.run(build_dir, workers=1, reuse_from=dataset)
    assert (summary.pending, summary.updated, summary.reused, summary.failed) == (2, 2, 1, 0)
    assert stored(build_dir, "needs") == (analysis(clang_tidy_version(), 7), 7)
    text, warnings = stored(build_dir, "never")
    assert json.loads(text)["version"] == clang_tidy_version() and warnings == 0
    assert "taken-from-the-export" not in text


def test_reuse_from_a_folder_without_records_is_one_line_exit_2(build_dir, tmp_path):
    done = run_cli("tidy", build_dir, "--reuse", tmp_path / "empty")
    assert done.returncode == 2 and done.stderr.startswith("error: ") and len(done.stderr.strip().splitlines()) == 1
