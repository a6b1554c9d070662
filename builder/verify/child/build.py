"""Compile one extension inside the sandbox: `python -m builder.verify.child.build JOB.json`, or forked from a build
zygote (`sandbox/zygote.py`: `before_fork` imports torch once, `main(["-"])` reads the job's path from stdin;
`compile/build_child.py`).

Runs `torch.utils.cpp_extension.load`, which also imports the built module: any load-time code of the
candidate therefore runs here, in the sandbox, never in the builder. Writes a result JSON:
`{"ok", "library_path", "module_name", "error", "compile_s", "cpu_s"}` (cpu_s: CPU seconds of the build).
Before anything else it writes `{"ok": false, "provisional": true}` there: a parent that finds no file at all
knows that the interpreter never got this far (`sandbox/suspects.compile_suspect`). The host compiler runs through
`ka-cxx` (`CXX`), which says on stderr, in the build log, when a signal ended the compiler or when there is none.

nvcc runs through `nvcc_side_by_side.py` (`PYTORCH_NVCC`) where the job says so: its host and device front ends at once.

Job JSON: `{"name", "source_path", "build_dir", "backend", "cflags", "cuda_cflags", "nvcc_side_by_side",
"nvcc_dependency_file", "nice", "result_path"}` (nice: the niceness the build runs at).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
import traceback
from pathlib import Path

WRAPPER = Path(__file__).with_name("ka-cxx")


def wrap_compiler() -> None:
    """The host compiler the build would run (`$CXX`, else c++), run through `ka-cxx` (see the module's text)."""
    os.environ["KA_REAL_CXX"] = os.environ.get("CXX") or "c++"
    os.environ["CXX"] = str(WRAPPER)


def skip_nvcc_dependency_file() -> None:
    """No nvcc dependency file: a build directory holds one build of one source, never built again, so ninja never
    reads it (config.NVCC_DEPENDENCY_FILE says what skipping it was measured to save)."""
    os.environ["TORCH_EXTENSION_SKIP_NVCC_GEN_DEPENDENCIES"] = "1"


def run_nvcc_side_by_side(cuda_home: str | None) -> None:
    """nvcc's front ends side by side (`nvcc_side_by_side.py`), without the dependency file its plan has no step for."""
    from builder.verify.child import nvcc_side_by_side  # here: the provisional result is written before any import

    if not cuda_home:
        return  # torch's own error (no CUDA_HOME) says what is missing
    skip_nvcc_dependency_file()
    os.environ[nvcc_side_by_side.REAL_NVCC_VARIABLE] = os.path.join(cuda_home, "bin", "nvcc")
    os.environ["PYTORCH_NVCC"] = shlex.join([sys.executable, "-I", nvcc_side_by_side.__file__])


def before_fork() -> None:
    """A build zygote's imports: torch, most of what every build's child would otherwise import itself (seconds of a
    core). Not its extension builder: importing that initialises the GPU driver in some torch releases, and a
    process that has done so may not fork (`zygote.fork_problem`); it costs a tenth of a second."""
    import torch  # noqa: F401


def compile_job(job: dict) -> dict:
    from torch.utils import cpp_extension

    started = time.monotonic()
    if job.get("nice"):
        os.nice(int(job["nice"]))  # the compilers it starts inherit it
    wrap_compiler()
    build_dir = Path(job["build_dir"])
    cuda = job["backend"] == "cuda"
    if cuda and job.get("nvcc_side_by_side"):
        run_nvcc_side_by_side(cpp_extension.CUDA_HOME)
    elif cuda and not job.get("nvcc_dependency_file", True):
        skip_nvcc_dependency_file()
    try:
        module = cpp_extension.load(
            name=job["name"],
            sources=[job["source_path"]],
            extra_cflags=list(job.get("cflags", [])),
            extra_cuda_cflags=list(job.get("cuda_cflags", [])) if cuda else None,
            build_directory=str(build_dir),
            with_cuda=cuda,
            verbose=False,
        )
    except Exception as exc:  # noqa: BLE001 - every failure becomes the candidate's compiler message
        return {
            "ok": False,
            "library_path": None,
            "module_name": job["name"],
            "error": f"{type(exc).__name__}: {exc}",
            "compile_s": time.monotonic() - started,
        }
    library = Path(getattr(module, "__file__", "") or build_dir / f"{job['name']}.so")
    return {
        "ok": True,
        "library_path": str(library),
        "module_name": job["name"],
        "error": None,
        "compile_s": time.monotonic() - started,
    }


def cpu_seconds() -> float:
    """CPU time of this process and every finished descendant (ninja, the compilers, the linker)."""
    import resource

    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m builder.verify.child.build JOB.json|-", file=sys.stderr)
        return 2
    job_path = sys.stdin.readline().strip() if argv[0] == "-" else argv[0]
    job = json.loads(Path(job_path).read_text())
    Path(job["result_path"]).write_text(json.dumps({"ok": False, "provisional": True, "module_name": job.get("name")}))
    try:
        result = compile_job(job)
    except BaseException:  # noqa: BLE001 - report, then let the parent read the file
        result = {"ok": False, "library_path": None, "module_name": job.get("name"), "error": traceback.format_exc()}
    result["cpu_s"] = cpu_seconds()
    Path(job["result_path"]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
