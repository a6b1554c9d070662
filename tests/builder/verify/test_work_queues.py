"""Which work queues a candidate's CUDA context gets: by its source before it runs, by its census after."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from builder import config
from builder.candidates import Candidate
from builder.generate.bundled import scan_corpus
from builder.tasks import load_suite
from builder.verify.child import op_census
from builder.verify.engine import baseline_cache, work_queues
from builder.verify.engine.verifier import Verifier, verify
from builder.verify.options import VerifyOptions
from schemas import validate

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "candidates"

ONE_STREAM = """
#include <torch/extension.h>
__global__ void scale(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2; }
torch::Tensor forward(torch::Tensor x) {
    auto stream = at::cuda::getCurrentCUDAStream();  // the stream it was called on
    scale<<<(x.numel() + 255) / 256, 256, 0, stream>>>(x.data_ptr<float>(), x.numel());
    return x;
}
"""


def cuda(source: str, language: str = "cuda") -> Candidate:
    return Candidate(task_id="1/1", source=source, language=language, kernel_name="k")


def test_the_candidates_children_get_the_configs_queues_and_zero_leaves_them_to_the_driver():
    assert work_queues.queues(VerifyOptions(backend="cuda")) == config.EVAL_DEVICE_CONNECTIONS
    assert work_queues.queues(VerifyOptions(backend="cuda", device_connections=4)) == 4
    assert work_queues.queues(VerifyOptions(backend="cuda", device_connections=work_queues.DRIVER_DEFAULT)) is None
    assert work_queues.queues(VerifyOptions(backend="cpu", device_connections=4)) is None
    options = VerifyOptions(backend="cuda", seeds=[1, 2])
    default = work_queues.driver_default(options)
    assert default.device_connections == work_queues.DRIVER_DEFAULT and default.seeds == [1, 2]
    assert work_queues.driver_default(default) is default


@pytest.mark.parametrize(
    "line",
    [
        "cudaStream_t s; cudaStreamCreate(&s);",
        "cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);",
        "auto side = at::cuda::getStreamFromPool();",
        "at::cuda::setCurrentCUDAStream(other);",
        "c10::cuda::CUDAStreamGuard guard(other);",
        "cudaGraph_t g; cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);",
        "cudaGraphLaunch(exec, stream);",
        "scale<<<1, 1, 0, cudaStreamPerThread>>>(p, n);",
        "void* f = dlsym(RTLD_DEFAULT, name);",
        "#define MAKE(kind) cuda##kind##Create",
    ],
)
def test_a_source_that_may_leave_its_stream_gets_the_drivers_queues(line):
    source = ONE_STREAM.replace("return x;", line + "\n    return x;")
    options = VerifyOptions(backend="cuda")
    assert work_queues.may_span_streams(cuda(source))
    assert work_queues.fitting(cuda(source), options).device_connections == work_queues.DRIVER_DEFAULT


def test_one_stream_kernels_and_mentions_in_comments_or_strings_keep_the_fewer_queues():
    options = VerifyOptions(backend="cuda")
    mentioned = ONE_STREAM + '// cudaStreamCreate is not called\nconst char* why = "no getStreamFromPool here";\n'
    for source in (ONE_STREAM, mentioned):
        assert not work_queues.may_span_streams(cuda(source))
        assert work_queues.fitting(cuda(source), options) is options
    assert (
        work_queues.fitting(cuda(ONE_STREAM + "cudaStreamCreate(&s);"), VerifyOptions(backend="cpu")).backend == "cpu"
    )


@pytest.mark.parametrize(
    "python, spans",
    [
        ("import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n", False),
        ("side = torch.cuda.Stream()\n", True),
        ("with torch.cuda.stream(side):\n    pass\n", True),
        ("g = torch.cuda.CUDAGraph()\n", True),
        ("f = torch.compile(f, mode='reduce-overhead')\n", True),
        ("make = getattr(torch.cuda, 'Str' + 'eam')\n", True),
        ("src = '''at::cuda::getStreamFromPool()'''\n", True),  # an inline extension's C++ is in a string
        ("exec(code)\n", True),
        ("model = Model().eval()\n", False),  # a module's eval mode is no lookup
    ],
)
def test_python_candidates_are_read_whole_and_dynamic_lookups_count(python, spans):
    assert work_queues.may_span_streams(cuda(python, language="python")) is spans


def test_the_side_stream_fixture_gets_the_drivers_queues_and_most_bundled_kernels_do_not():
    side = (FIXTURES / "cuda" / "incorrect_side_stream.cu").read_text()
    assert work_queues.may_span_streams(cuda(side))
    bundled = [entry.candidate() for entry in scan_corpus("cuda")]
    spanning = [c.kernel_name for c in bundled if work_queues.may_span_streams(c)]
    assert bundled and len(spanning) <= len(bundled) // 10, spanning


@pytest.mark.parametrize(
    "census, spans",
    [
        ({"streams": 1, "other_streams": 0, "graph_launches": 0}, False),
        ({"streams": 2, "other_streams": 1, "graph_launches": 0}, True),
        ({"streams": 1, "other_streams": 1, "graph_launches": 0}, True),  # all of it on one other stream
        ({"streams": 1, "other_streams": 0, "graph_launches": 3}, True),
        ({"streams": "2", "other_streams": None, "graph_launches": True}, False),  # not counts: no claim
        ({}, False),
    ],
)
def test_the_census_decides_a_second_run_with_the_drivers_queues(census, spans):
    assert work_queues.spanned_streams({"status": "correct", "op_census": census}) is spans
    assert work_queues.spanned_streams(None) is False
    assert work_queues.spanned_streams({"op_census": "many"}) is False


def test_the_census_counts_streams_other_than_the_markers_and_graph_launches():
    from torch.autograd import DeviceType

    def event(name: str, device_type, stream=None):
        return SimpleNamespace(name=name, device_type=device_type, device_resource_id=stream)

    current = {7}
    one = [event("cudaLaunchKernel", DeviceType.CPU, 1), event("scale", DeviceType.CUDA, 7)]
    assert op_census._concurrency(one, current) == {"streams": 1, "other_streams": 0, "graph_launches": 0}
    side = one + [event("scale", DeviceType.CUDA, 13)]
    assert op_census._concurrency(side, current) == {"streams": 2, "other_streams": 1, "graph_launches": 0}
    graph = one + [event("cudaGraphLaunch_v10000", DeviceType.CPU, 1)]
    assert op_census._concurrency(graph, current)["graph_launches"] == 1
    moved = [event("scale", DeviceType.CUDA, 13)]
    assert op_census._concurrency(moved, current)["other_streams"] == 1
    assert op_census._concurrency(moved, set())["other_streams"] == 0  # no marker seen: streams alone decide


# --- the engine against the trusted fake child (tests/fixtures/sandbox/fake_child.py) ---------------------------

FAKE_CHILD = "tests.fixtures.sandbox.fake_child"


@pytest.fixture
def as_if_on_cuda(monkeypatch):
    """The CPU backend's children as CUDA ones would be: fewer queues unless the options leave them to the driver
    (the count only reaches a CUDA child's environment: test_pool.py)."""
    monkeypatch.setattr(work_queues, "queues", lambda o: None if o.device_connections == 0 else 2)


@pytest.fixture
def options(tmp_path):
    return VerifyOptions(backend="cpu", timeout_s=30, child_module=FAKE_CHILD, trials=2,
                         baseline_cache_dir=tmp_path / "baselines", build_cache_dir=tmp_path / "builds")  # fmt: skip


def fake(directive: dict, body: str = "", name: str = "fake") -> Candidate:
    source = f"# FAKE: {json.dumps(directive)}\n{body}class ModelNew: pass  # {name}\n"
    return Candidate(task_id="1/1", source=source, language="python", kernel_name=name)


def test_a_kernel_whose_census_left_its_stream_is_evaluated_again_with_the_drivers_queues(
    as_if_on_cuda, options, caplog
):
    task = load_suite().get("1/1")
    caplog.set_level(logging.INFO, logger="builder.verify.engine.verifier")
    stays = verify(fake({"op_census": {"streams": 1, "other_streams": 0}}, name="stays"), task, options)
    assert stays.status == "correct" and stays.device_connections == 2
    assert "evaluated again" not in caplog.text
    leaves = verify(fake({"op_census": {"streams": 2, "other_streams": 1}}, name="leaves"), task, options)
    assert leaves.status == "correct" and leaves.device_connections is None  # the second run's record
    assert caplog.text.count("evaluated again") == 1
    assert validate(stays) == [] and validate(leaves) == []


def test_a_source_that_makes_streams_skips_the_pre_started_child_and_the_second_run(as_if_on_cuda, options, caplog):
    task = load_suite().get("1/1")
    caplog.set_level(logging.INFO, logger="builder.verify.engine.verifier")
    making = fake({"op_census": {"streams": 2, "other_streams": 1}}, "side = torch.cuda.Stream()\n", "making")
    plain = fake({}, name="plain")
    records = {
        r.kernel_name: r for r in Verifier(replace(options, eval_workers=1)).stream([(making, task), (plain, task)])
    }
    assert records["making"].status == "correct" and records["making"].device_connections is None
    assert records["plain"].status == "correct" and records["plain"].device_connections == 2
    assert "evaluated again" not in caplog.text  # the source decided before it ran


def test_the_baselines_time_pytorch_with_the_drivers_queues(as_if_on_cuda, options, monkeypatch):
    task = load_suite().get("1/1")
    seen: list[int | None] = []
    real = baseline_cache.run_in_turn

    def recording(job, scratch, given, *args, **kwargs):
        seen.append(given.device_connections)
        return real(job, scratch, given, *args, **kwargs)

    monkeypatch.setattr(baseline_cache, "run_in_turn", recording)
    record = verify(fake({}), task, options)
    assert record.device_connections == 2 and record.compile_ms is not None
    assert seen and set(seen) == {work_queues.DRIVER_DEFAULT}  # measured again where the window's eager disagreed
