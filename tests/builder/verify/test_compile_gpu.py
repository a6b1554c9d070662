"""CUDA builds on a real GPU (marked gpu: skipped without one)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from builder.verify import environment
from builder.verify.child import nvcc_side_by_side
from builder.verify.compile import batching
from builder.verify.compile.extension import build_extension
from builder.verify.sandbox.process import run_sandboxed

pytestmark = pytest.mark.gpu
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "sandbox"
EXPECTED = {"gpu_add_scalar.cu": 1.0 + 1.0, "gpu_mul_scalar.cu": 1.0 * 2.0, "gpu_sub_scalar.cu": 1.0 - 3.0}


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    cache = tmp_path_factory.mktemp("gpu-compile-cache")

    def run(source: str, language: str):
        return build_extension(source, language, "cuda", cache_dir=cache, timeout_s=600)

    return run


def call_on_ones(library_path: str, module_name: str, symbol: str) -> float:
    """Import the extension in a sandboxed child and return forward(ones(1000)) summed / 1000."""
    code = (
        "import importlib.util, sys, torch\n"
        "spec = importlib.util.spec_from_file_location(sys.argv[2], sys.argv[1])\n"
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
        "fn = module\n"
        "for part in sys.argv[3].split('.'): fn = getattr(fn, part)\n"
        "out = fn(torch.ones(1000, device='cuda'))\n"
        "torch.cuda.synchronize()\n"
        "print('RESULT', float(out.mean()), float(out.min()), float(out.max()))\n"
    )
    scratch = Path(library_path).parent / "call-scratch"
    outcome = run_sandboxed([sys.executable, "-c", code, library_path, module_name, symbol], scratch, 300,
                            ro_binds=[Path(library_path).parent])  # fmt: skip
    assert outcome.returncode == 0, outcome.stderr_tail
    mean, low, high = (float(v) for v in outcome.stdout_tail.split("RESULT", 1)[1].split())
    assert low == high == mean
    return mean


def test_cuda_candidate_builds_for_the_present_arch_and_runs(build):
    result = build((FIXTURES / "gpu_add_scalar.cu").read_text(), "cuda")
    assert result.ok, result.error
    assert call_on_ones(result.library_path, result.module_name, result.symbol) == EXPECTED["gpu_add_scalar.cu"]
    arch = environment.gpu_arch().replace(".", "")
    log = (Path(result.library_path).parent / "build.ninja").read_text()
    assert f"sm_{arch}" in log
    other_archs = {"sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"} - {f"sm_{arch}"}
    assert not any(f"code={other}" in log for other in other_archs)


def test_three_cuda_candidates_share_one_build(build):
    names = sorted(EXPECTED)
    sources = [((FIXTURES / name).read_text(), "cuda") for name in names]
    with ThreadPoolExecutor(2) as executor:
        results = batching.compile_many(sources, build, executor=executor)
    assert all(r.ok for r in results), [r.error for r in results]
    assert len({r.library_path for r in results}) == 1 and results[0].batch_size == 3
    for name, result in zip(names, results, strict=True):
        assert call_on_ones(result.library_path, result.module_name, result.symbol) == EXPECTED[name]


def test_a_cuda_build_runs_nvccs_front_ends_side_by_side(build):
    """The build's own nvcc line, as torch wrote it for this GPU, takes the side-by-side plan, not nvcc's own run."""
    result = build((FIXTURES / "gpu_mul_scalar.cu").read_text() + "// built once more\n", "cuda")
    assert result.ok, result.error
    build_dir = Path(result.library_path).parent
    ninja = dict(line.split(" = ", 1) for line in (build_dir / "build.ninja").read_text().splitlines() if " = " in line)
    assert nvcc_side_by_side.SCRIPT_NAME in ninja["nvcc"]
    assert "--generate-dependencies-with-compile" not in ninja["cuda_cflags"]
    source = next(build_dir.glob("*.cu"))
    arguments = [*shlex.split(ninja["cuda_cflags"]), "-c", str(source), "-o", "probe.o"]
    nvcc = os.path.join(environment.cuda_home(), "bin", "nvcc")
    listing = subprocess.run([nvcc, "--dryrun", *arguments], cwd=build_dir, capture_output=True, text=True)
    assert listing.returncode == 0, listing.stderr
    plan = nvcc_side_by_side.plan_from_dryrun(listing.stderr, arguments, dict(os.environ))
    assert plan is not None, listing.stderr
    assert [step.tool for step in plan.device_chain][1:] == ["cicc", "ptxas", "fatbinary"]
