"""KernelBench's own flow beside the throughput bench (`kernelbench_flow.py`), against a stand-in of KernelBench's
`eval` module that runs on the host (tests/fixtures/kernelbench_stand_in): how it is found, the ModelNew source a
bundled kernel becomes, the flow's verdicts and stopped kernels, the lines the bench prints, and a kernel checked
again by name (`kernelbench_recheck.py`)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks import kernelbench_flow as flow
from builder.tasks import load_suite

ROOT = Path(__file__).resolve().parents[2]
STAND_IN = ROOT / "tests" / "fixtures" / "kernelbench_stand_in"


@pytest.fixture
def stand_in(monkeypatch):
    """KernelBench's checkout named by the variable, as a user of the bench names theirs."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv(flow.KERNELBENCH_DIR_ENV, str(STAND_IN))
    yield "kernelbench.eval"
    for name in [name for name in sys.modules if name == "kernelbench" or name.startswith("kernelbench.")]:
        del sys.modules[name]


def relu_source() -> str:
    """Task 1/19 at its CPU size: the reference source KernelBench is given, sized for a host."""
    task = load_suite().get("1/19")
    return task.source + "".join(f"\n{name} = {value!r}" for name, value in task.cpu_size.items()) + "\n"


def test_kernelbench_is_found_only_where_it_can_be_imported(monkeypatch, stand_in):
    assert flow.find_eval_module() == stand_in
    monkeypatch.delenv(flow.KERNELBENCH_DIR_ENV)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(STAND_IN)])
    del sys.modules["kernelbench.eval"], sys.modules["kernelbench"]
    assert flow.find_eval_module() is None
    assert flow.side_by_side([], [], 1000.0, 32, 1, Path("/nonexistent"))[0].startswith("KernelBench: not importable")


def test_a_bundled_kernel_becomes_the_tasks_model_with_the_kernels_forward():
    source = flow.model_new_source("class Model: ...\n", "// the kernel\n", "cuda", "naive-3")
    assert source.startswith("class Model: ...\n")  # the task's own Model, inputs and init inputs
    assert "load_inline(name='ka_kernelbench_naive_3', cpp_sources=[''], cuda_sources=['// the kernel\\n']" in source
    assert "class ModelNew(Model):" in source and "fn=_ka_extension.forward" in source
    cpu = flow.model_new_source("", "// host\n", "cpp", "x")
    assert "cpp_sources=['// host\\n'], cuda_sources=None" in cpu
    compile(source, "<model_new>", "exec")  # valid Python


@pytest.mark.slow
def test_the_flow_gives_each_kernel_its_verdict_and_stops_one_that_hangs(stand_in, tmp_path):
    reference = relu_source()
    kernels = [
        ("correct", reference, reference + "\nclass ModelNew(Model):\n    pass\n"),
        ("off", reference, reference + "\nclass ModelNew(Model):\n    def forward(self, x):\n        return x\n"),
        ("hangs", reference, reference + "\nSTAND_IN_SLEEP_S = 600\nclass ModelNew(Model):\n    pass\n"),
        ("broken", reference, reference + "\nraise RuntimeError('does not build')\n"),
    ]
    result = flow.run_flow(kernels, stand_in, compile_workers=2, work_dir=tmp_path, device="cpu", timeout_s=45)
    verdicts = result.verdicts
    assert verdicts["correct"]["compiled"] and verdicts["correct"]["correct"]
    assert verdicts["off"]["compiled"] and not verdicts["off"]["correct"]
    assert verdicts["off"]["why"].startswith("correctness_issue: Output mismatch; max_difference: [")  # KernelBench's
    assert "why" not in verdicts["correct"]
    assert not verdicts["hangs"]["correct"] and "timed out after 45 s" in verdicts["hangs"]["why"]
    assert not verdicts["broken"]["compiled"] and not verdicts["broken"]["correct"]
    assert result.kernels == 4 and (result.count("correct"), result.count("compiled")) == (1, 3)
    assert 45 <= result.wall_s and result.per_hour == pytest.approx(4 / result.wall_s * 3600)


@pytest.mark.slow
def test_a_bundled_cpu_kernel_runs_as_kernelbench_would_run_it(stand_in, tmp_path):
    reference = relu_source()
    kernel = (ROOT / "data" / "candidates" / "cpu" / "level1" / "19_relu" / "naive.cpp").read_text()
    kernels = [("naive", reference, flow.model_new_source(reference, kernel, "cpp", "naive"))]
    result = flow.run_flow(kernels, stand_in, compile_workers=1, work_dir=tmp_path, device="cpu")
    assert result.verdicts["naive"] == {"compiled": True, "correct": True, "runtime_ms": -1.0}
    assert any((tmp_path / "kernel-0").rglob("*.so"))  # built where the compile pool was told, and found there


def test_the_bench_prints_both_rates_and_the_kernels_judged_otherwise(monkeypatch, stand_in):
    pairs = [(SimpleNamespace(kernel_name=name, language="cuda", source="//"), SimpleNamespace(source="# task"))
             for name in ("a-0", "b-1", "c-2")]  # fmt: skip
    records = [
        SimpleNamespace(kernel_name="a-0", status="correct"),
        SimpleNamespace(kernel_name="b-1", status="incorrect"),
    ]
    ran = {}

    def fake_run(kernels, module_name, compile_workers, work_dir):
        ran.update(names=[name for name, _, _ in kernels], module=module_name, workers=compile_workers)
        return flow.FlowResult(kernels=2, wall_s=36.0, verdicts={
            "a-0": {"compiled": True, "correct": True}, "b-1": {"compiled": True, "correct": True}})  # fmt: skip

    monkeypatch.setattr(flow, "run_flow", fake_run)
    lines = flow.side_by_side(pairs, records, 2000.0, 2, 8, Path("/unused"))
    assert ran == {"names": ["a-0", "b-1"], "module": stand_in, "workers": 8}  # the first 2, on 8 compile workers
    assert lines[0] == ("KernelBench's own flow (kernelbench.eval): 200 kernels/h over the first 2 of the same "
                        "kernels in 36.0 s (2 compiled, 2 correct); this engine 2,000/h from the start: 10.0x")  # fmt: skip
    assert lines[1].endswith("1 of 2") and "b-1" in lines[2]


def naive_relu_pairs() -> list:
    """The mix as `kernelbench_recheck` reads it, one kernel: the bundled CPU ReLU on task 1/19 at its CPU size."""
    kernel = (ROOT / "data" / "candidates" / "cpu" / "level1" / "19_relu" / "naive.cpp").read_text()
    return [
        (SimpleNamespace(kernel_name="naive-0", source=kernel, language="cpp"), SimpleNamespace(source=relu_source()))
    ]


@pytest.mark.slow
def test_a_kernel_is_checked_again_at_the_defaults_and_with_tf32_off(monkeypatch, stand_in, tmp_path, capsys):
    import torch

    from benchmarks import kernelbench_recheck as recheck

    monkeypatch.setattr(recheck, "corpus", lambda backend, count, tasks: naive_relu_pairs())
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32  # put back after the test
    try:
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
        assert recheck.main(["naive-0", "--backend", "cpu", "--device", "cpu", "--out", str(tmp_path)]) == 0
        assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
    verdict = "{'compiled': True, 'correct': True, 'runtime_ms': -1.0}"
    assert capsys.readouterr().out.splitlines() == [f"defaults: naive-0: {verdict}", f"TF32 off: naive-0: {verdict}"]


def test_a_recheck_names_what_it_cannot_find(monkeypatch, stand_in, capsys):
    from benchmarks import kernelbench_recheck as recheck

    monkeypatch.setattr(recheck, "corpus", lambda backend, count, tasks: naive_relu_pairs())
    with pytest.raises(SystemExit) as stopped:
        recheck.main(["naive-0", "fused-7", "--backend", "cpu", "--kernels", "4", "--tasks", "2"])
    assert stopped.value.code == 2 and "not in a mix of 4 kernels over 2 tasks: fused-7" in capsys.readouterr().err
    monkeypatch.setattr(recheck.flow, "find_eval_module", lambda: None)
    assert recheck.main(["naive-0"]) == 2
    assert capsys.readouterr().err.startswith("error: KernelBench is not importable")
