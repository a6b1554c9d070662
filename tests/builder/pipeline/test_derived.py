"""Derived configs on synthetic records: preference pair selection, sakana columns, template rendering; the
sample archive's sakana rows hold whole runnable task programs."""

from __future__ import annotations

from collections import Counter

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import torch

from builder import config
from builder.errors import UsageError
from builder.pipeline.derived import preference_table, render, sakana_table, sft_table
from builder.pipeline.synthetic import synthetic_records
from builder.tasks import instantiate, load_task_module
from builder.tasks.suite import describe_task_file
from schemas.arrow import kernel_record_schema, sakana_schema

TEMPLATE = "Task {{task_name}} level {{level}} in {{language_name}}:\n{{reference_code}}"


@pytest.fixture(scope="module")
def records():
    return synthetic_records(3000, tasks=4)


def test_preference_pairs_are_capped_balanced_and_pick_the_clearest(records):
    table = preference_table(records, TEMPLATE).to_pylist()
    per_task = Counter(row["task_id"] for row in table)
    assert per_task and max(per_task.values()) == config.PREFERENCE_PAIRS_PER_TASK
    assert {row["reason"] for row in table} == {"faster", "correct_vs_failed"}
    for row in table:
        if row["reason"] == "faster":
            assert row["rejected_runtime_ms"] >= row["chosen_runtime_ms"] * config.PREFERENCE_MIN_SPEEDUP
        else:
            assert row["rejected_status"] != "correct"
    # The single clearest pair of a task (its fastest vs its slowest eligible kernel) is always kept.
    task = records.filter(pc.equal(records.column("task_id"), table[0]["task_id"]))
    eligible = task.filter(task.column("ranking_eligible")).to_pylist()
    fastest = min(eligible, key=lambda r: r["runtime_ms"])["kernel_id"]
    slowest = max(eligible, key=lambda r: r["runtime_ms"])["kernel_id"]
    assert any(r["chosen_kernel_id"] == fastest and r["rejected_kernel_id"] == slowest for r in table)


def test_sft_takes_only_ranking_eligible_kernels(records):
    sft = sft_table(records, TEMPLATE)
    assert sft.num_rows == pc.sum(records.column("ranking_eligible")).as_py()
    first = sft.to_pylist()[0]
    assert first["prompt"].startswith("Task task_") and "def module_fn" in first["prompt"]


def test_sakana_table_has_exactly_the_public_schema(records):
    table = sakana_table(records)
    assert table.schema.equals(sakana_schema()) and len(table.schema) == 18
    assert pc.sum(table.column("Correct")).as_py() == pc.sum(pc.equal(records.column("status"), "correct")).as_py()


def test_render_is_one_pass_and_rejects_unknown_fields():
    assert render("{{a}}", {"a": "{{b}}"}) == "{{b}}"
    with pytest.raises(UsageError, match="unknown field"):
        render("{{nope}}", {})


SAMPLE_DEFAULT = config.SAMPLE_ARCHIVE_DIR / "data"


def test_sakana_functional_column_is_a_complete_runnable_program(tmp_path):
    records = pq.read_table(SAMPLE_DEFAULT, schema=kernel_record_schema())
    relu = records.filter(pc.equal(records.column("task_id"), "1/19")).slice(0, 1)
    (row,) = sakana_table(relu).to_pylist()
    program = row["PyTorch_Code_Functional"]
    assert program == relu.column("reference_module_code")[0].as_py() == row["PyTorch_Code_Module"]
    path = tmp_path / "level1" / "19_relu.py"
    path.parent.mkdir()
    path.write_text(program)
    task = describe_task_file(path)  # defines Model, get_inputs, get_init_inputs ...
    assert task.has_functional  # ... and module_fn, which Model.forward(..., fn=module_fn) calls
    module = load_task_module(task, size="cpu")
    model, inputs = instantiate(module, seed=0)
    assert torch.equal(model(*inputs, fn=module.module_fn), torch.relu(*inputs))


def test_shipped_sakana_config_is_derived_from_the_default_one():
    records = pq.read_table(SAMPLE_DEFAULT, schema=kernel_record_schema())
    shipped = pq.read_table(config.SAMPLE_ARCHIVE_DIR / "sakana")
    assert shipped.equals(sakana_table(records))
    assert all("def get_init_inputs" in code for code in shipped.column("PyTorch_Code_Functional").to_pylist())


def test_tasks_without_a_functional_form_have_no_functional_program(records):
    assert records.column("reference_functional_code").null_count == records.num_rows
    assert sakana_table(records).column("PyTorch_Code_Functional").null_count == records.num_rows
