"""nvcc's steps scheduled side by side (child/nvcc_steps.py): the plan it recognises, and real nvcc builds that give
what nvcc alone gives: the object, the errors and the exit status. The real builds need nvcc (no GPU)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from builder.verify.child import nvcc_steps

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="needs nvcc")
ARCH = ["-gencode=arch=compute_90,code=sm_90"]

GOOD = """
#include <cstdio>
__global__ void scale(float* data, float by) { data[threadIdx.x] *= by; }
template <int N> __global__ void fill(float* data) { data[threadIdx.x] = N; }
void launch(float* data) { scale<<<1, 32>>>(data, 2.0f); fill<3><<<1, 32>>>(data); }
int host_only(int x) { return x * 7; }
"""
DEVICE_ERROR = "__global__ void k(int* a) { a[0] = not_declared_anywhere; }\n"
HOST_COMPILE_ERROR = '__global__ void k(int* a) { a[0] = 1; }\nvoid host() { asm volatile("not_an_instruction"); }\n'
DEVICE_ONLY_ERROR = (
    "int host_helper(int x) { return x; }\n"
    "__global__ void k(int* a) { a[0] = host_helper(1); }\n"  # a host function called from the device: cicc's error
)


def dry_run(*steps: str, env: str = "PATH=/usr/bin") -> str:
    return "\n".join([f"#$ {env}", *(f"#$ {line}" for line in steps)]) + "\n"


SEVEN = (
    'gcc -E -x c++ -D__CUDACC__ "x.cu" -o "/k/x.cpp4.ii"',
    'cudafe++ --gen_c_file_name "/k/x.cudafe1.cpp" --stub_file_name "x.cudafe1.stub.c" --gen_module_id_file '
    '--module_id_file_name "/k/x.module_id" "/k/x.cpp4.ii"',
    'gcc -D__CUDA_ARCH__=900 -E -x c++ -D__CUDACC__ "x.cu" -o "/k/x.cpp1.ii"',
    '"$CICC_PATH/cicc" --module_id_file_name "/k/x.module_id" --stub_file_name "/k/x.cudafe1.stub.c" '
    '"/k/x.cpp1.ii" -o "/k/x.ptx"',
    'ptxas -arch=sm_90 "/k/x.ptx" -o "/k/x.sm_90.cubin"',
    'fatbinary --create="/k/x.fatbin" --embedded-fatbin="/k/x.fatbin.c"',
    'gcc -D__CUDA_ARCH__=900 -c -x c++ "/k/x.cudafe1.cpp" -o "x.o"',
)


def test_the_seven_steps_of_one_object_are_a_plan_in_nvccs_order() -> None:
    plan = nvcc_steps.parse_plan(dry_run(*SEVEN, env="CICC_PATH=/cuda/nvvm/bin"))
    assert plan is not None
    assert plan.order == list(nvcc_steps.KINDS)
    assert plan.env == {"CICC_PATH": "/cuda/nvvm/bin"}


@pytest.mark.parametrize(
    "steps",
    [
        pytest.param(SEVEN[:-1], id="a step missing"),
        pytest.param((*SEVEN[:4], SEVEN[3], *SEVEN[4:]), id="two architectures"),
        pytest.param((*SEVEN[:2], "-- Filter Dependencies -- > x.o.d", *SEVEN[2:]), id="a dependency file"),
        pytest.param((*SEVEN, 'nvlink -o "/k/x_dlink.cubin"'), id="a device link"),
        pytest.param(
            (
                SEVEN[0],
                SEVEN[1].replace("--gen_module_id_file ", ""),
                SEVEN[2],
                SEVEN[3].replace("--module_id_file_name", "--gen_module_id_file --module_id_file_name"),
                *SEVEN[4:],
            ),
            id="the module id made by cicc",
        ),  # fmt: skip
    ],
)
def test_any_other_plan_is_left_to_nvcc(steps: tuple[str, ...]) -> None:
    assert nvcc_steps.parse_plan(dry_run(*steps)) is None


@pytest.mark.parametrize("option", ["-M", "-MD", "--time=t.csv", "-rdc", "-ptx", "-keep", "-dryrun"])
def test_options_that_change_the_steps_are_not_scheduled(option: str) -> None:
    assert not nvcc_steps.scheduled(["-c", "x.cu", "-o", "x.o", option])
    assert nvcc_steps.scheduled(["-c", "x.cu", "-o", "x.o", "-O3"])


def _build(tmp_path: Path, source: str, scheduled: bool, extra: tuple[str, ...] = ()) -> tuple[int, str, Path]:
    """(exit status, everything printed, trace file) of compiling `source` one way."""
    where = tmp_path / ("scheduled" if scheduled else "nvcc")
    where.mkdir(exist_ok=True)
    (where / "k.cu").write_text(source)
    trace = where / "trace.jsonl"
    argv = ["-c", "k.cu", "-o", "k.o", "-O3", *ARCH, *extra]
    if scheduled:
        env = {**os.environ, nvcc_steps.REAL_NVCC_ENV: str(NVCC), nvcc_steps.TRACE_ENV: str(trace),
               "PYTHONPATH": str(Path(__file__).resolve().parents[3])}  # fmt: skip
        command = [sys.executable, "-m", "builder.verify.child.nvcc_steps", *argv]
    else:
        env, command = dict(os.environ), [str(NVCC), *argv]
    done = subprocess.run(command, cwd=where, env=env, capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout + done.stderr, trace


def _defined_symbols(path: Path) -> list[str]:
    listing = subprocess.run(["nm", "--defined-only", str(path)], capture_output=True, text=True, check=True).stdout
    return sorted(" ".join(line.split()[1:]) for line in listing.splitlines())


def _trace(path: Path) -> dict[str, dict]:
    return {row["step"]: row for row in map(json.loads, path.read_text().splitlines())} if path.exists() else {}


@needs_nvcc
def test_a_scheduled_build_gives_nvccs_object_with_the_host_compile_beside_cicc(tmp_path: Path) -> None:
    status, printed, trace = _build(tmp_path, GOOD, scheduled=True)
    assert status == 0, printed
    alone, printed_alone, _ = _build(tmp_path, GOOD, scheduled=False)
    assert alone == 0, printed_alone
    # The same symbols: the kernels, their stubs and registration, the fatbin (the module id differs by run).
    symbols = _defined_symbols(tmp_path / "scheduled" / "k.o")
    assert symbols and len(symbols) == len(_defined_symbols(tmp_path / "nvcc" / "k.o"))
    assert [name for name in symbols if "scale" in name or "fill" in name or "host_only" in name] == [
        name for name in _defined_symbols(tmp_path / "nvcc" / "k.o") if "scale" in name or "fill" in name
        or "host_only" in name
    ]  # fmt: skip
    steps = _trace(trace)
    assert set(steps) == set(nvcc_steps.KINDS)
    assert steps["device_preprocess"]["start"] < steps["cudafe"]["end"]  # beside the host front end
    assert steps["host_compile"]["start"] < steps["cicc"]["end"]  # parsing while cicc runs
    assert steps["host_compile"]["end"] > steps["fatbinary"]["end"]  # and finishing with the fatbin in it
    assert not list((tmp_path / "scheduled").glob("*.fifo")) and sorted(
        path.name for path in (tmp_path / "scheduled").iterdir()
    ) == ["k.cu", "k.o", "trace.jsonl"]  # nvcc's steps left nothing behind


@needs_nvcc
@pytest.mark.parametrize(
    ("source", "says"),
    [
        pytest.param(DEVICE_ERROR, "not_declared_anywhere", id="the front end's error"),
        pytest.param(DEVICE_ONLY_ERROR, "host_helper", id="cicc's error"),
        pytest.param(HOST_COMPILE_ERROR, "not_an_instruction", id="the host compile's error"),
    ],
)
def test_a_failed_step_gives_nvccs_message_and_exit_status(tmp_path: Path, source: str, says: str) -> None:
    status, printed, trace = _build(tmp_path, source, scheduled=True)
    alone, printed_alone, _ = _build(tmp_path, source, scheduled=False)
    assert alone != 0 and says in printed_alone
    assert status == alone
    assert says in printed
    failed = [step for step, row in _trace(trace).items() if row["returncode"]]
    assert len(failed) == 1  # nothing after the failed step is reported, as nvcc would not have run it
    assert not (tmp_path / "scheduled" / "k.o").exists() or status == 0


@needs_nvcc
def test_a_plan_it_does_not_know_is_nvccs_own_build(tmp_path: Path) -> None:
    two_archs = ("-gencode=arch=compute_80,code=sm_80",)
    status, printed, trace = _build(tmp_path, GOOD, scheduled=True, extra=two_archs)
    assert status == 0, printed
    assert (tmp_path / "scheduled" / "k.o").is_file()
    assert not trace.exists()  # nvcc ran alone


def test_without_the_real_nvcc_named_it_says_so(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.delenv(nvcc_steps.REAL_NVCC_ENV, raising=False)
    assert nvcc_steps.main(["-c", "x.cu"]) == 127
    assert "KA_REAL_NVCC" in capsys.readouterr().err


def test_the_build_child_has_torch_run_nvcc_through_the_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    from builder.verify.child import build

    for name in ("PYTORCH_NVCC", nvcc_steps.REAL_NVCC_ENV, "TORCH_EXTENSION_SKIP_NVCC_GEN_DEPENDENCIES"):
        monkeypatch.delenv(name, raising=False)
    build.schedule_nvcc(None)  # a torch without CUDA: nothing to schedule
    assert "PYTORCH_NVCC" not in os.environ
    build.schedule_nvcc("/opt/cuda")
    assert os.environ[nvcc_steps.REAL_NVCC_ENV] == "/opt/cuda/bin/nvcc"
    assert os.environ["PYTORCH_NVCC"].endswith(" -m builder.verify.child.nvcc_steps")
    assert os.environ["TORCH_EXTENSION_SKIP_NVCC_GEN_DEPENDENCIES"] == "1"  # no dependency file: nvcc's own plan
