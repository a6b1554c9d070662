"""clang-tidy on a candidate's source: structured diagnostics, counted per severity.

Runs in the trusted parent: clang-tidy only parses the text, it never executes it. The binary comes
from the `clang-tidy` PyPI wheel, so no system LLVM is needed. CUDA sources are parsed in clang's
CUDA mode, host side only (`--cuda-host-only`): the host pass sees the whole file, kernel bodies
included, and skips the device pass, which halves the time and avoids clang's device-side launch
lowering that does not know CUDA 13's runtime API. The result is JSON-ready:

    {"tool": "clang-tidy", "version", "mode": "cuda"|"cuda-reduced"|"c++", "checks", "seconds",
     "diagnostics": [{line, column, check, severity, message}], "counts": {severity: n},
     "warnings", "errors", "header_errors", "truncated", "notes": [...]}

or {"error": reason}. Only diagnostics located in the candidate file are kept; errors raised inside
headers (e.g. a header the candidate needs but this machine lacks) are counted in `header_errors`.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from functools import lru_cache
from pathlib import Path

from builder import config

SUFFIX_BY_LANGUAGE = {"cuda": ".cu", "cpp": ".cpp"}
# The error of a record built where clang-tidy was not installed (e.g. a GPU box): `kernel-archive tidy` fills those later.
CLANG_TIDY_MISSING = "clang-tidy not found (pip install clang-tidy)"
DIAGNOSTIC_LINE = re.compile(
    r"^(?P<file>.+?):(?P<line>\d+):(?P<column>\d+): (?P<severity>warning|error|fatal error|remark): "
    r"(?P<message>.*?)(?: \[(?P<check>[\w.,\-]+)\])?$"
)
# clang's CUDA wrapper force-includes this curand header; minimal toolkits (and CUDA images without
# curand) lack it, and it only redeclares builtin variables, so an empty stand-in is harmless.
CURAND_WRAPPER_HEADER = "curand_mtgp32_kernel.h"
# CPU builds of torch ship c10/cuda/*.h without the generated config header they include; it only
# defines C10_CUDA_BUILD_SHARED_LIBS, so a stand-in lets a CPU-only machine parse CUDA candidates fully.
TORCH_CUDA_CONFIG_HEADER = "c10/cuda/impl/cuda_cmake_macros.h"
TORCH_CUDA_CONFIG_STANDIN = "#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n"
# Without any CUDA toolkit headers clang cannot include its CUDA wrapper; these defines let the
# host pass still parse the attributes of kernels (reduced mode).
REDUCED_CUDA_SHIM = """\
#pragma once
#include <stdlib.h> /* clang's cuda_wrappers/new uses ::malloc and ::free */
#define __host__ __attribute__((host))
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __managed__ __attribute__((managed))
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#include <__clang_cuda_builtin_vars.h>
"""


@lru_cache(maxsize=1)
def clang_tidy_binary() -> str | None:
    """The wheel's clang-tidy (its package data), else one on PATH / next to this Python."""
    try:
        import clang_tidy as wheel

        path = Path(wheel.get_executable("clang-tidy"))
        if path.exists():
            return str(path)
    except (ImportError, FileNotFoundError, AttributeError):
        pass
    search = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return shutil.which("clang-tidy", path=search)


@lru_cache(maxsize=1)
def clang_tidy_version() -> str | None:
    binary = clang_tidy_binary()
    if binary is None:
        return None
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"version\s+([\w.\-]+)", out)
    return match.group(1) if match else None


def torch_include_dirs() -> list[str]:
    """torch's C++ include dirs and the Python headers, as an extension build would use them."""
    dirs: list[str] = []
    try:
        from torch.utils.cpp_extension import include_paths

        dirs.extend(include_paths())
    except Exception:  # noqa: BLE001 - torch missing or broken: analyse without its headers
        pass
    python_include = sysconfig.get_paths().get("include")
    if python_include:
        dirs.append(python_include)
    return [d for d in dirs if Path(d).is_dir()]


def cuda_toolkit_root() -> Path | None:
    """CUDA_HOME / CUDA_PATH, else the directory of nvcc, else /usr/local/cuda, when it has headers."""
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(str(Path(nvcc).resolve().parent.parent))
    candidates.append("/usr/local/cuda")
    for candidate in candidates:
        if candidate and (Path(candidate) / "include" / "cuda_runtime.h").is_file():
            return Path(candidate)
    return None


def normalise_arch(arch: str | None) -> str:
    """clang's --cuda-gpu-arch spelling ("sm_90") from "9.0", "90", "sm90", "sm_90a" or None."""
    if not arch:
        return config.CLANG_TIDY_CUDA_ARCH
    text = str(arch).strip().lower()
    match = re.fullmatch(r"(\d+)\.(\d+)", text)
    if match:
        return f"sm_{match.group(1)}{match.group(2)}"
    match = re.fullmatch(r"(?:sm_?)?(\d+[a-z]?)", text)
    return f"sm_{match.group(1)}" if match else config.CLANG_TIDY_CUDA_ARCH


def compile_arguments(language: str, workdir: Path, arch: str | None = None) -> tuple[list[str], str, list[str]]:
    """(compiler arguments after `--`, mode, notes) for a source of `language` analysed in `workdir`."""
    includes = [f"-isystem{d}" for d in torch_include_dirs()]
    notes: list[str] = []
    if language == "cpp":
        return ["-x", "c++", "-std=c++17", *includes], "c++", notes
    if language != "cuda":
        raise ValueError(f"clang-tidy analyses cuda or cpp sources, not {language!r}")
    gpu_arch = normalise_arch(arch)
    args = ["-x", "cuda", f"--cuda-gpu-arch={gpu_arch}", "--cuda-host-only", "-nocudalib", "-std=c++17"]
    root = cuda_toolkit_root()
    if root is None:
        shim = workdir / "reduced_cuda_shim.h"
        shim.write_text(REDUCED_CUDA_SHIM)
        notes.append(
            "CUDA toolkit headers not found: reduced mode (kernel attributes only; includes of CUDA "
            "headers are reported as errors and may hide diagnostics after them)"
        )
        return [*args, "-nocudainc", "-include", str(shim), *includes], "cuda-reduced", notes
    args += [f"--cuda-path={root}", "--no-cuda-version-check"]
    extra = []
    cccl = root / "include" / "cccl"  # CUDA 13 moved thrust/cub/libcu++ here
    if cccl.is_dir():
        extra.append(f"-isystem{cccl}")
    if not (root / "include" / CURAND_WRAPPER_HEADER).is_file():
        stub_dir = workdir / "stub_include"
        stub_dir.mkdir(exist_ok=True)
        (stub_dir / CURAND_WRAPPER_HEADER).write_text("#pragma once\n")
        extra.append(f"-isystem{stub_dir}")
        notes.append(f"{CURAND_WRAPPER_HEADER} absent from the toolkit: an empty stand-in was used")
    torch_dirs = torch_include_dirs()
    if torch_dirs and not any((Path(d) / TORCH_CUDA_CONFIG_HEADER).is_file() for d in torch_dirs):
        stub_dir = workdir / "stub_include"
        (stub_dir / TORCH_CUDA_CONFIG_HEADER).parent.mkdir(parents=True, exist_ok=True)
        (stub_dir / TORCH_CUDA_CONFIG_HEADER).write_text(TORCH_CUDA_CONFIG_STANDIN)
        if f"-isystem{stub_dir}" not in extra:
            extra.append(f"-isystem{stub_dir}")
        notes.append(f"{TORCH_CUDA_CONFIG_HEADER} absent (a CPU build of torch): a stand-in was used")
    return [*args, *includes, *extra], "cuda", notes


def parse_diagnostics(output: str, source_path: str) -> dict:
    """Diagnostics of `source_path` from clang-tidy's text output, plus counts.

    Notes (the "move occurred here" lines) are context for the diagnostic before them, not findings.
    """
    source_name = os.path.realpath(source_path)
    diagnostics: list[dict] = []
    header_errors = 0
    for line in output.splitlines():
        match = DIAGNOSTIC_LINE.match(line)
        if not match:
            continue
        severity = "error" if match["severity"] == "fatal error" else match["severity"]
        if os.path.realpath(match["file"]) != source_name:
            if severity == "error":
                header_errors += 1
            continue
        check = match["check"] or ("clang-diagnostic-error" if severity == "error" else None)
        diagnostics.append(
            {
                "line": int(match["line"]),
                "column": int(match["column"]),
                "check": check,
                "severity": severity,
                "message": match["message"],
            }
        )
    counts: dict[str, int] = {}
    for diag in diagnostics:
        counts[diag["severity"]] = counts.get(diag["severity"], 0) + 1
    limit = config.CLANG_TIDY_MAX_DIAGNOSTICS
    return {
        "diagnostics": diagnostics[:limit],
        "counts": counts,
        "warnings": counts.get("warning", 0),
        "errors": counts.get("error", 0),
        "header_errors": header_errors,
        "truncated": len(diagnostics) > limit,
    }


def _run_bounded(argv: list[str], timeout_s: float, cwd: Path) -> tuple[int | None, str]:
    """Run argv in its own session; on timeout kill the whole group. (returncode or None, output)."""
    proc = subprocess.Popen(
        argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None, ""
    return proc.returncode, output


def run_clang_tidy(
    source: str,
    language: str,
    arch: str | None = None,
    timeout_s: float = config.CLANG_TIDY_TIMEOUT_S,
    checks: str = config.CLANG_TIDY_CHECKS,
) -> dict:
    """Analyse `source` (language "cuda" or "cpp"); never raises for tool failures."""
    if language not in SUFFIX_BY_LANGUAGE:
        return {"error": f"clang-tidy analyses CUDA and C++ sources; this candidate is {language}"}
    binary = clang_tidy_binary()
    if binary is None:
        return {"error": CLANG_TIDY_MISSING}
    with tempfile.TemporaryDirectory(prefix="ka-tidy-") as tmp:
        workdir = Path(tmp)
        source_path = workdir / f"candidate{SUFFIX_BY_LANGUAGE[language]}"
        source_path.write_text(source)
        compile_args, mode, notes = compile_arguments(language, workdir, arch)
        argv = [binary, f"--checks={checks}", "--quiet", str(source_path), "--", *compile_args]
        started = time.monotonic()
        try:
            returncode, output = _run_bounded(argv, timeout_s, workdir)
        except OSError as exc:
            return {"error": f"clang-tidy could not start: {exc}"}
        seconds = round(time.monotonic() - started, 3)
        if returncode is None:
            return {"error": f"clang-tidy timed out after {timeout_s:g} s"}
        result = {
            "tool": "clang-tidy",
            "version": clang_tidy_version(),
            "mode": mode,
            "arch": normalise_arch(arch) if language == "cuda" else None,
            "checks": checks,
            "seconds": seconds,
            **parse_diagnostics(output, str(source_path)),
            "notes": notes,
        }
    if returncode != 0 and result["errors"] == 0 and result["header_errors"] == 0:
        # clang-tidy failed without a compiler error we could place: keep its last words.
        result["notes"].append(f"clang-tidy exited with {returncode}: {output.strip()[-500:]}")
    return result
