"""Importers: an 18-column archive written by the test, our own export (both configs), KernelBench folders, .cu
folders; claims summary."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from builder import config
from builder.candidates import Candidate
from builder.errors import UsageError
from builder.generate import create_generator, drive
from builder.generate.importers import ImportGenerator, claims_summary, detect_source_kind
from builder.generate.importers.common import detect_language
from builder.generate.importers.sakana import functional_program
from builder.tasks import instantiate, load_task_module
from schemas import sakana_mapping
from schemas.arrow import kernel_record_schema

from .helpers import make_record, verify_engine

RELU_FUNCTIONAL = '''import torch
import torch.nn as nn


def module_fn(x: torch.Tensor) -> torch.Tensor:
    """Applies ReLU."""
    return torch.relu(x)


class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor, fn=module_fn) -> torch.Tensor:
        return fn(x)


batch_size = 16
dim = 64


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

RELU_MODULE = RELU_FUNCTIONAL.replace(", fn=module_fn", "").replace("return fn(x)", "return torch.relu(x)")

CPU_RELU = """#include <torch/extension.h>
torch::Tensor forward(torch::Tensor x) {
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const float* in = x.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) o[i] = in[i] > 0.f ? in[i] : 0.f;
    return out;
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "relu"); }
"""

# Returns a buffer it never writes: on the original archive's GPU setup the allocator handed back the
# reference's freed output, so it "passed". The archive claims it correct and 40x faster.
CPU_UNWRITTEN = """#include <torch/extension.h>
torch::Tensor forward(torch::Tensor x) {
    return torch::empty_like(x);
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "relu (never writes)"); }
"""

CUDA_RELU = "#include <torch/extension.h>\n__global__ void relu_kernel(const float* x, float* y, int n) {}\n"


def sakana_rows() -> list[dict]:
    base = {
        "Op_Name": "19_ReLU",
        "Level_ID": 1,
        "Task_ID": 19,
        "CUDA_Runtime": 0.01,
        "PyTorch_Native_Runtime": 0.02,
        "PyTorch_Compile_Runtime": 0.03,
        "CUDA_Speedup_Compile": 3.0,
        "PyTorch_Code_Module": RELU_MODULE,
        "PyTorch_Code_Functional": RELU_FUNCTIONAL,
        "Max_Diff": 0.0,
        "Error": None,
        "NCU_Profile": None,
        "Torch_Profile": None,
        "Clang_Tidy": None,
    }
    return [
        base | {"Kernel_Name": "relu_loop", "CUDA_Code": CPU_RELU, "Correct": True, "CUDA_Speedup_Native": 1.5},
        base
        | {"Kernel_Name": "relu_unwritten", "CUDA_Code": CPU_UNWRITTEN, "Correct": True, "CUDA_Speedup_Native": 40.0},
        base | {"Kernel_Name": "relu_cuda", "CUDA_Code": CUDA_RELU, "Correct": True, "CUDA_Speedup_Native": 2.0},
        base
        | {
            "Kernel_Name": "no_reference",
            "CUDA_Code": CPU_RELU,
            "PyTorch_Code_Functional": None,
            "Correct": False,
            "CUDA_Speedup_Native": None,
        },
    ]


def write_sakana_parquet(path: Path) -> Path:
    rows = sakana_rows()
    types = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_()}
    schema = pa.schema([(col, types[typ]) for col, (_, typ) in sakana_mapping().items()])
    assert len(schema) == 18
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path


@pytest.fixture
def sakana_file(tmp_path) -> Path:
    return write_sakana_parquet(tmp_path / "archive" / "level_1.parquet")


def test_sakana_rows_become_candidates_with_claims_and_tasks(sakana_file, tmp_path):
    gen = ImportGenerator(str(sakana_file), backend="cpu", out_dir=tmp_path / "build")
    batch = next(gen.run([]))
    assert [c.kernel_name for c in batch] == ["relu_loop", "relu_unwritten"]
    loop, unwritten = batch
    assert loop.generator == "import" and loop.language == "cpp" and loop.task_id == "1/19"
    assert (unwritten.claimed_correct, unwritten.claimed_speedup) == (True, 40.0)
    assert unwritten.source_ref == "level_1.parquet#1"
    task = gen.task_for(unwritten)
    assert task.path.is_relative_to(tmp_path / "build") and task.has_functional and task.name == "ReLU"
    assert task.suite == "import:level_1.parquet"
    module = load_task_module(task)
    model, inputs = instantiate(module, seed=0)
    assert model(*inputs, fn=module.module_fn).shape == (16, 64)  # the reference the verifier will call
    notes = " ".join(gen.notes)
    assert "row 2: CUDA kernel needs the cuda backend" in notes and "row 3: no PyTorch_Code_Functional" in notes


def test_cuda_backend_keeps_cuda_rows(sakana_file, tmp_path):
    batch = next(ImportGenerator(str(sakana_file), backend="cuda", out_dir=tmp_path).run([]))
    assert [c.language for c in batch] == ["cpp", "cpp", "cuda"]


def test_jsonl_and_variant_references(tmp_path):
    rows = sakana_rows()[:2]
    rows[1]["PyTorch_Code_Functional"] = RELU_FUNCTIONAL.replace("dim = 64", "dim = 32")
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    gen = ImportGenerator(str(path), backend="cpu", out_dir=tmp_path / "build")
    first, second = next(gen.run([]))
    assert first.task_id == second.task_id == "1/19"
    assert gen.task_for(first).path != gen.task_for(second).path
    assert "dim = 32" in gen.task_for(second).source


def test_not_the_archive_schema_is_a_usage_error(tmp_path):
    path = tmp_path / "other.parquet"
    pq.write_table(pa.table({"a": [1]}), path)
    with pytest.raises(UsageError, match="missing column"):
        next(ImportGenerator(str(path), backend="cpu", out_dir=tmp_path).run([]))


def test_hub_dataset_from_the_offline_cache(tmp_path, monkeypatch):
    import huggingface_hub.constants as hub_constants

    commit = "a" * 40
    repo = tmp_path / "hub" / "datasets--someorg--kernel-archive"
    write_sakana_parquet(repo / "snapshots" / commit / "data" / "level_1-00000.parquet")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    gen = create_generator("import", backend="cpu", out_dir=tmp_path / "build", source="someorg/kernel-archive")
    assert gen.kind == "hub"
    assert [c.kernel_name for c in next(gen.run([]))] == ["relu_loop", "relu_unwritten"]
    with pytest.raises(UsageError, match="not in the local cache"):
        next(ImportGenerator("someorg/absent", backend="cpu", out_dir=tmp_path).run([]))


def test_kernelbench_generation_folder(tmp_path, tiny_tasks):
    run = tmp_path / "runs" / "my_run"
    run.mkdir(parents=True)
    (run / "level_1_problem_1_sample_0_kernel.py").write_text("class ModelNew:\n    pass\n")
    (run / "level_1_problem_2_sample_3_kernel.py").write_text("print('no model here')\n")
    (run / "level_1_problem_7_sample_0_kernel.py").write_text("class ModelNew:\n    pass\n")
    nested = tmp_path / "runs" / "level1"
    nested.mkdir()
    (nested / "2_leaky.py").write_text("class ModelNew:\n    pass\n")
    assert detect_source_kind(str(tmp_path / "runs"))[0] == "kernelbench"
    gen = ImportGenerator(str(tmp_path / "runs"), backend="cpu", out_dir=tmp_path)
    batch = next(gen.run(list(tiny_tasks.values())))
    assert sorted((c.task_id, c.kernel_name, c.language) for c in batch) == [
        ("1/1", "level_1_problem_1_sample_0_kernel", "python"),
        ("1/2", "2_leaky", "python"),
    ]
    notes = " ".join(gen.notes)
    assert "no ModelNew class" in notes and "task 1/7 is not among this build's tasks" in notes


def test_cu_folder_with_manifest(tmp_path, tiny_tasks):
    folder = tmp_path / "kernels"
    folder.mkdir()
    (folder / "relu.cpp").write_text(CPU_RELU)
    (folder / "relu_gpu.cu").write_text(CUDA_RELU)
    manifest = {
        "relu.cpp": {"task": "1/1", "claimed_correct": True, "claimed_speedup": 2.5, "model": "m"},
        "relu_gpu.cu": "1/1",
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    gen = ImportGenerator(str(folder), backend="cpu", out_dir=tmp_path)
    (candidate,) = next(gen.run(list(tiny_tasks.values())))
    assert (candidate.task_id, candidate.claimed_speedup, candidate.model, candidate.language) == (
        "1/1",
        2.5,
        "m",
        "cpp",
    )
    assert any("relu_gpu.cu: CUDA kernel needs the cuda backend" in n for n in gen.notes)
    (folder / "stray.cu").write_text("")
    with pytest.raises(UsageError, match="stray.cu: kernel file not listed"):
        next(ImportGenerator(str(folder), backend="cpu", out_dir=tmp_path).run(list(tiny_tasks.values())))
    (folder / "manifest.json").write_text(json.dumps({"relu.cpp": "first"}))
    with pytest.raises(UsageError, match="expected a task id"):
        next(ImportGenerator(str(folder), backend="cpu", out_dir=tmp_path).run(list(tiny_tasks.values())))


def test_unknown_sources(tmp_path):
    with pytest.raises(UsageError, match="import source not found"):
        detect_source_kind(str(tmp_path / "nothing-here"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="not an importable folder"):
        detect_source_kind(str(tmp_path / "empty"))


def test_claims_summary_counts_what_held(sakana_file, tmp_path, tiny_tasks):
    gen = ImportGenerator(str(sakana_file), backend="cpu", out_dir=tmp_path)
    loop, unwritten = next(gen.run([]))
    task = gen.task_for(loop)
    records = [
        make_record(loop, task, "correct", speedup_eager=1.4),
        make_record(unwritten, task, "incorrect", flags=["uninitialized_output"]),
        make_record(Candidate(task_id=task.id, source="own", language="cpp", kernel_name="own"), task, "incorrect"),
    ]
    summary = claims_summary(records)
    assert summary["records"] == 2  # the record without claims is not counted
    assert summary["claimed_correct"] == 2 and summary["held"] == 1 and summary["refuted"] == 1
    assert summary["held_fraction"] == 0.5
    assert summary["refuted_by_flag"] == {"uninitialized_output": 1}
    assert summary["refuted_by_status"] == {"incorrect": 1}
    assert summary["speedup_compared"] == 1 and summary["speedup_held"] == 1
    assert claims_summary([])["held_fraction"] is None


@pytest.mark.slow
@pytest.mark.timeout(1800)  # two C++ extension builds; minutes on a busy 2-core machine
def test_reverification_reports_the_disagreement(sakana_file, tmp_path):
    """End to end on the CPU backend through the real verifier (once builder.verify.engine.verifier exists)."""
    engine = verify_engine()
    gen = ImportGenerator(str(sakana_file), backend="cpu", out_dir=tmp_path)
    verifier = engine.Verifier(engine.VerifyOptions(backend="cpu"))  # one shared build for the batch
    records = drive(gen, [], lambda batch: list(verifier.stream((c, gen.task_for(c)) for c in batch)))
    by_name = {r.kernel_name: r for r in records}
    assert by_name["relu_loop"].status == "correct"
    assert by_name["relu_unwritten"].status != "correct" and by_name["relu_unwritten"].claimed_correct is True
    summary = claims_summary(records)
    assert summary["held"] == 1 and summary["refuted"] == 1


SAMPLE = config.SAMPLE_ARCHIVE_DIR


@pytest.mark.parametrize("config_path, kind", [("", "records"), ("data", "records"), ("sakana", "sakana")])
def test_our_export_imports_with_the_ids_it_stored(config_path, kind, tmp_path):
    stored = pq.read_table(SAMPLE / "data", columns=["task_id", "kernel_id"]).to_pylist()
    gen = ImportGenerator(str(SAMPLE / config_path), backend="cuda", out_dir=tmp_path)
    assert gen.kind == kind
    batch = next(gen.run([]))
    assert {(c.task_id, c.kernel_id) for c in batch} == {(r["task_id"], r["kernel_id"]) for r in stored}
    assert gen.notes == [] and len(gen.generated_tasks) == len({r["task_id"] for r in stored})
    task = gen.task_for(batch[0])
    assert task.has_functional and task.id == batch[0].task_id and task.name == "square_matmul"
    if kind == "records":  # the archive's own verdicts travel with the candidates
        key = (batch[0].task_id, batch[0].kernel_id)
        assert gen.recorded[key]["status"] in ("correct", "incorrect", "compile_error", "runtime_error")
        assert batch[0].claimed_correct == (gen.recorded[key]["status"] == "correct")


def test_cuda_records_are_left_out_on_the_cpu_backend(tmp_path):
    gen = ImportGenerator(str(SAMPLE), backend="cpu", out_dir=tmp_path)
    assert next(gen.run([])) == [] and all("CUDA kernel needs the cuda backend" in note for note in gen.notes)


def test_records_file_detection_and_problems(tmp_path):
    from builder.pipeline.synthetic import synthetic_records

    records = synthetic_records(2, tasks=1).to_pylist()
    records[1]["reference_module_code"] = RELU_MODULE  # module form only: the kernel cannot be called as fn=
    path = tmp_path / "records.parquet"
    pq.write_table(pa.Table.from_pylist(records, schema=kernel_record_schema()), path)
    assert detect_source_kind(str(path)) == ("records", path)
    gen = ImportGenerator(str(path), backend="cuda", out_dir=tmp_path / "build")
    (candidate,) = next(gen.run([]))
    assert candidate.kernel_id != records[0]["kernel_id"]  # synthetic ids are not content hashes
    notes = " ".join(gen.notes)
    assert "is not its source's hash (recomputed)" in notes and "lacks module_fn" in notes
    (tmp_path / "mixed").mkdir()
    pq.write_table(synthetic_records(1, tasks=1), tmp_path / "mixed" / "a.parquet")
    pq.write_table(pa.table({"a": [1]}), tmp_path / "mixed" / "b.parquet")
    with pytest.raises(UsageError, match="b.parquet: not in the record schema"):
        next(ImportGenerator(str(tmp_path / "mixed"), backend="cpu", out_dir=tmp_path).run([]))


def test_functional_column_holding_only_module_fn_reads_the_module_column(tmp_path):
    row = sakana_rows()[0] | {"PyTorch_Code_Functional": "def module_fn(x):\n    return x\n"}
    row["PyTorch_Code_Module"] = RELU_FUNCTIONAL  # an early export of ours: the task file was here
    assert functional_program(row) == RELU_FUNCTIONAL
    row["PyTorch_Code_Module"] = RELU_MODULE  # a module program without module_fn cannot be called as fn=
    assert functional_program(row) == "def module_fn(x):\n    return x\n"


def test_language_detection():
    assert detect_language(CPU_RELU) == "cpp" and detect_language(CUDA_RELU) == "cuda"
    model_new = 'import torch\nsrc = "__global__ void k() {}"\nclass ModelNew(torch.nn.Module):\n    pass\n'
    assert detect_language(model_new) == "python"
