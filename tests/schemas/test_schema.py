"""The record schema: one definition, documented, and every derived form agrees with it."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

import schemas
from schemas.arrow import kernel_record_schema, sakana_schema

README = Path(schemas.__file__).with_name("README.md").read_text()

SAKANA_COLUMNS = [
    "Op_Name",
    "Level_ID",
    "Task_ID",
    "Kernel_Name",
    "CUDA_Runtime",
    "PyTorch_Native_Runtime",
    "PyTorch_Compile_Runtime",
    "CUDA_Speedup_Native",
    "CUDA_Speedup_Compile",
    "CUDA_Code",
    "PyTorch_Code_Module",
    "PyTorch_Code_Functional",
    "Correct",
    "Max_Diff",
    "Error",
    "NCU_Profile",
    "Torch_Profile",
    "Clang_Tidy",
]


def minimal_record(**overrides):
    fields = dict(
        kernel_id="0" * 20,
        task_id="1/1",
        level=1,
        task_number=1,
        op_name="square_matmul",
        kernel_name="naive",
        backend="cpu",
        language="cpp",
        generator="manual",
        cuda_code="// code",
        status="correct",
        flags=[],
        ranking_eligible=True,
    )
    fields.update(overrides)
    return schemas.KernelRecord(**fields)


def test_every_field_is_documented():
    for name in schemas.field_names():
        assert f"`{name}`" in README, f"{name} missing from schemas/README.md"
    for flag in schemas.flag_vocabulary():
        assert f"`{flag}`" in README


def test_issue_required_fields_exist():
    names = set(schemas.field_names())
    wanted = {
        "kernel_id",
        "task_id",
        "level",
        "task_number",
        "op_name",
        "kernel_name",
        "generator",
        "model",
        "experiment",
        "parent_ids",
        "round",
        "cuda_code",
        "reference_module_code",
        "reference_functional_code",
        "status",
        "flags",
        "error",
        "max_diff",
        "mean_diff",
        "trials",
        "atol",
        "rtol",
        "runtime_ms",
        "runtime_mean_ms",
        "runtime_std_ms",
        "eager_ms",
        "compile_ms",
        "speedup_eager",
        "speedup_compile",
        "ncu_profile",
        "torch_profile",
        "clang_tidy",
        "ncu_duration_ms",
        "ncu_sm_pct",
        "ncu_dram_pct",
        "ncu_occupancy_pct",
        "ncu_registers",
        "clang_tidy_warnings",
        "gpu_name",
        "driver_version",
        "cuda_version",
        "torch_version",
        "nvcc_version",
        "seed_policy",
        "builder_version",
        "created_at",
        "isolation",
        "embedding",
        "map_x",
        "map_y",
        "cluster_id",
        "cluster_label",
        "strategy_tags",
        "dup_group",
    }
    assert wanted <= names, wanted - names


def test_arrow_schema_is_derived_not_restated():
    arrow = kernel_record_schema()
    assert arrow.names == schemas.field_names()
    assert arrow.field("embedding").type == pa.list_(pa.float32())
    assert arrow.field("flags").type == pa.list_(pa.string())
    assert arrow.field("ncu_profile").type == pa.string()
    assert not arrow.field("kernel_id").nullable
    assert arrow.field("runtime_ms").nullable


def test_sakana_schema_has_exactly_the_18_columns():
    sak = sakana_schema()
    assert sak.names == SAKANA_COLUMNS
    assert sak.field("Correct").type == pa.bool_()
    assert sak.field("Level_ID").type == pa.int64()
    for column, (source, _type) in schemas.sakana_mapping().items():
        assert source in schemas.field_names(), (column, source)


def test_valid_record_passes_and_round_trips_through_arrow():
    record = minimal_record(ncu_profile=json.dumps({"kernels": []}), seeds=[123, 456], embedding=[0.1, 0.2])
    assert schemas.validate(record) == []
    table = pa.Table.from_pylist([schemas.record_to_dict(record)], schema=kernel_record_schema())
    back = schemas.record_from_dict(table.to_pylist()[0])
    assert back.seeds == [123, 456]
    assert back.status == "correct"


@pytest.mark.parametrize(
    "overrides, problem",
    [
        ({"status": "passed"}, "status"),
        ({"flags": ["made_up_flag"]}, "flags"),
        ({"ncu_profile": "{not json"}, "ncu_profile"),
        ({"level": "one"}, "level"),
        ({"backend": "tpu"}, "backend"),
    ],
)
def test_invalid_records_are_reported(overrides, problem):
    problems = schemas.validate(minimal_record(**overrides))
    assert any(p.startswith(problem) for p in problems), problems


def test_flag_classes():
    disq = schemas.disqualifying_flags()
    assert {
        "input_mutation",
        "uninitialized_output",
        "nondeterministic",
        "ignores_input",
        "side_stream",
        "tampers_reference",
        "implausible_runtime",
        "timing_mismatch",
        "lazy_output",
        "tampers_verifier",
        "slowed_baseline",
    } == set(disq)
    assert set(schemas.flag_vocabulary()) - disq == {
        "degenerate_task",
        "uses_torch_ops",
        "host_side_effects",
        "suspicious_speedup",
    }
