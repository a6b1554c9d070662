"""The DuckDB store: schema derived from schemas/, one transaction per record, resume keys, bad dirs."""

from __future__ import annotations

import json
import shutil

import duckdb
import pytest
from pipeline_fakes import fake_record

from builder import config
from builder.candidates import Candidate
from builder.errors import UsageError
from builder.pipeline.store import Store, db_path, duckdb_type
from builder.redaction import REDACTED
from builder.tasks import load_suite
from schemas import arrow_types, record_to_dict

KEY = "sk-live-0123456789abcdef"


@pytest.fixture
def task():
    return load_suite().get("1/1")


def make_record(task, source="// kernel a\n", **changes):
    candidate = Candidate(task_id=task.id, source=source, language="cpp", kernel_name="k", generator="bundled")
    record = fake_record(candidate, task, type("Options", (), {"backend": "cpu", "seeds": [1, 2]})())
    for key, value in changes.items():
        setattr(record, key, value)
    return record


def test_columns_and_types_derive_from_the_schema(tmp_path):
    with Store.open(tmp_path) as store:
        rows = store.con.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'records' ORDER BY ordinal_position"
        ).fetchall()
    assert [name for name, _ in rows] == list(arrow_types())
    assert dict(rows) == {name: duckdb_type(typ) for name, typ in arrow_types().items()}


def test_record_round_trips_and_duplicates_are_ignored(tmp_path, task):
    record = make_record(task, max_diff=float("nan"))
    with Store.open(tmp_path) as store:
        assert store.add_record(record) is True
        assert store.add_record(record) is False
        assert store.count() == 1
        assert store.done_keys() == {(task.id, record.kernel_id)}
        (back,) = store.records_for([(task.id, record.kernel_id)])
        assert store.baselines() == {(task.id, "cpu", "fake-cpu"): (1.5, 1.2)}
    expected = record_to_dict(record) | {"max_diff": None}  # NaN means "not measured": stored as NULL
    assert record_to_dict(back) == expected


def test_no_stored_text_shows_a_secret_the_builder_holds(tmp_path, task, monkeypatch):
    monkeypatch.setenv("EXAMPLE_API_KEY", KEY)
    record = make_record(task, status="runtime_error", error=f"RuntimeError: {KEY}", flags=[f"note {KEY}"])
    with Store.open(tmp_path) as store:
        store.add_secrets(["generator-key-0001"])  # the generator's own (builder/generate/base.py: secrets)
        assert store.add_record(record)
        tidy = json.dumps({"diagnostics": [{"message": "quoted generator-key-0001 here"}]})
        assert store.update_fields(task.id, record.kernel_id, {"clang_tidy": tidy})
    with Store.open_existing(tmp_path) as store:
        (back,) = store.records_for([(task.id, record.kernel_id)])
        assert store.secrets == []  # a reader holds none
    assert back.error == f"RuntimeError: {REDACTED}" and back.flags == [f"note {REDACTED}"]
    assert json.loads(back.clang_tidy) == {"diagnostics": [{"message": f"quoted {REDACTED} here"}]}
    assert (back.task_id, back.kernel_id) == (record.task_id, record.kernel_id)  # the key a rerun resumes by


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_key_a_sandboxed_candidate_read_and_quoted_is_stored_redacted(tmp_path, monkeypatch):
    # A key in a file the sandbox does not hide (beside the task here: every child reads its task's folder), which
    # the builder holds too. The child's error quotes it, as a compiler quotes a file it was made to include.
    from builder.verify.engine.verifier import Verifier, VerifyOptions

    suite = tmp_path / "suite"
    shutil.copytree(config.REPO_ROOT / "tests" / "fixtures" / "tasks", suite)
    leaked = suite / "level1" / "project.env"
    leaked.write_text(f"EXAMPLE_API_KEY={KEY}\n")
    monkeypatch.setenv("EXAMPLE_API_KEY", KEY)
    task = load_suite(suite).get("1/1")
    source = ("import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def __init__(self, *args):\n"
              "        super().__init__()\n\n    def forward(self, x):\n"
              f"        raise RuntimeError(open({str(leaked)!r}).read())\n")  # fmt: skip
    candidate = Candidate(task_id=task.id, source=source, language="python", kernel_name="leaky", generator="bundled")
    options = VerifyOptions(backend="cpu", build_cache_dir=tmp_path / "builds", baseline_cache_dir=tmp_path / "b")
    (record,) = Verifier(options).stream([(candidate, task)])
    assert record.status == "runtime_error" and KEY in record.error  # what the child said, as the parent got it
    with Store.open(tmp_path / "build") as store:
        store.add_record(record)
        (stored,) = store.records_for([(task.id, record.kernel_id)])
    assert KEY not in stored.error and f"EXAMPLE_API_KEY={REDACTED}" in stored.error


def test_commits_survive_an_unclosed_connection(tmp_path, task):
    store = Store.open(tmp_path)
    store.add_record(make_record(task))
    # No close(): what a killed orchestrator leaves behind. DuckDB's WAL must bring the row back.
    del store
    with Store.open_existing(tmp_path) as reopened:
        assert reopened.count() == 1


def test_missing_and_malformed_build_dirs_are_one_line_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="no such build directory"):
        Store.open_existing(tmp_path / "absent")
    with pytest.raises(UsageError, match="not a build directory"):
        Store.open_existing(tmp_path)
    db_path(tmp_path).write_text("not a database")
    with pytest.raises(UsageError, match="not a readable build database"):
        Store.open_existing(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    duckdb.connect(str(db_path(other))).execute("CREATE TABLE something (x INTEGER)").close()
    with pytest.raises(UsageError, match="missing table"):
        Store.open_existing(other)


def test_an_older_store_gains_new_schema_columns(tmp_path, task):
    with Store.open(tmp_path) as store:
        store.con.execute('ALTER TABLE records DROP COLUMN "dup_group"')
    with Store.open(tmp_path) as store:
        assert store.add_record(make_record(task, dup_group="g1"))
        assert store.con.execute("SELECT dup_group FROM records").fetchall()[0] == ("g1",)


def test_builds_table_records_parameters_seeds_and_state(tmp_path):
    with Store.open(tmp_path) as store:
        run = store.start_build({"backend": "cpu"}, [11, 22], {"hostname": "h"})
        store.finish_build(run.build_id, "finished", {"stored": 3})
        (row,) = store.builds()
    assert row["parameters"] == {"backend": "cpu"} and row["seeds"] == [11, 22]
    assert row["state"] == "finished" and row["counts"] == {"stored": 3}
    assert row["seed_policy"] == config.SEED_POLICY and row["finished_at"]
