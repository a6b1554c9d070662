"""The dataset card's facts, read from the records."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pipeline_fakes import fake_record

from builder.candidates import Candidate
from builder.pipeline.card import collect_facts, render_card
from builder.tasks import load_suite
from schemas import record_to_dict
from schemas.arrow import kernel_record_schema


@pytest.fixture
def task():
    return load_suite().get("1/1")


def records(task, rows: list[dict]) -> pa.Table:
    made = []
    for index, changes in enumerate(rows):
        candidate = Candidate(task_id=task.id, source=f"// kernel {index}\n", language="cuda", kernel_name=f"k{index}")
        record = fake_record(candidate, task, type("Options", (), {"backend": "cuda", "seeds": [1, 2]})())
        for key, value in changes.items():
            setattr(record, key, value)
        made.append(record_to_dict(record))
    return pa.Table.from_pylist(made, schema=kernel_record_schema())


def test_the_card_counts_the_work_queues_of_the_kernels_whose_child_ran(task):
    table = records(task, [
        {"backend": "cuda", "eval_s": 1.0, "device_connections": 2},
        {"backend": "cuda", "eval_s": 1.0, "device_connections": 2},
        {"backend": "cuda", "eval_s": 1.0, "device_connections": None},  # spans streams: the driver's
        {"backend": "cuda", "eval_s": None, "device_connections": None, "status": "compile_error"},
    ])  # fmt: skip
    facts = collect_facts(table, [], "mit")
    assert facts.work_queues == {2: 2, "the driver's (8)": 1}
    card = render_card(facts, {})
    assert "(`device_connections`): 2 (2), the driver's (8) (1)." in card


def test_a_card_without_cuda_kernels_says_nothing_of_work_queues(task):
    table = records(task, [{"backend": "cpu", "eval_s": 1.0, "device_connections": None}])
    facts = collect_facts(table, [], "mit")
    assert not facts.work_queues and "device_connections" not in render_card(facts, {})


def test_the_card_states_the_runtime_floor_and_the_speed_of_light_of_correct_kernels(task):
    table = records(task, [
        {"backend": "cuda", "status": "correct", "floor_ms": 0.02, "speed_of_light": 0.8},
        {"backend": "cuda", "status": "correct", "floor_ms": 0.01, "speed_of_light": 0.1},
        {"backend": "cuda", "status": "incorrect", "floor_ms": 0.02, "speed_of_light": 11.0},  # implausible_runtime
        {"backend": "cpu", "status": "correct", "floor_ms": None, "speed_of_light": None},
    ])  # fmt: skip
    facts = collect_facts(table, [], "mit")
    assert facts.floors == 3 and facts.speeds_of_light == [0.1, 0.8]
    card = render_card(facts, {})
    assert "(`floor_ms`, 3 CUDA records)" in card and "median 0.45, highest 0.80" in card
    assert "`implausible_runtime`" in card


def test_a_card_without_floors_says_nothing_of_them(task):
    table = records(task, [{"backend": "cpu", "floor_ms": None, "speed_of_light": None}])
    assert "floor_ms`," not in render_card(collect_facts(table, [], "mit"), {})
