"""Nsight Compute: the command prefix for a profiled child, report parsing and the record columns.

Flow (CUDA backend; the verification engine drives it):
1. `ncu_available()` -> path of `ncu` on PATH, or None (then the field is {"error": NCU_MISSING}).
2. The parent runs `ncu_argv(report) + child_argv` inside the sandbox. The child wraps ONE candidate
   call (after a warm-up call outside the range) in the NVTX push/pop range config.NVTX_CANDIDATE_RANGE;
   `--nvtx-include "candidate/"` (trailing slash = push/pop range) limits ncu to the kernels launched
   inside it, so the reference's kernels are never profiled. Clocks are left alone
   (`--clock-control none`).
3. `collect(report, ...)` / `parse_report(report)` -> {"kernels": [...], ...} or {"error": reason}.
   The report is read with Nsight Compute's own `ncu_report` Python module in a subprocess (a
   crashing native module or a hostile report cannot take the builder down); when the module cannot
   be imported, `ncu --import REPORT --csv --page details` is parsed instead (ncu_csv.py).
4. `promote(profile)` -> the record's ncu_* columns.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from builder import config
from builder.profile.ncu_csv import parse_details_csv

NCU_MISSING = "ncu not found on PATH"
NCU_REPORT_MODULE_GLOBS = (
    "/opt/nvidia/nsight-compute/*/extras/python",
    "/usr/local/cuda*/nsight-compute*/extras/python",
    "/usr/local/NVIDIA-Nsight-Compute*/extras/python",
)


def ncu_available() -> str | None:
    """Absolute path of the `ncu` executable found on PATH, else None."""
    return shutil.which("ncu")


def ncu_argv(report_path: str | Path, ncu: str | None = None) -> list[str]:
    """The prefix placed before the child's argv so that ncu profiles the candidate's range."""
    binary = ncu or ncu_available() or "ncu"
    argv = [binary, "--clock-control", "none", "--target-processes", "all"]
    for section in config.NCU_SECTIONS:
        argv += ["--section", section]
    argv += [
        "--launch-count", str(config.NCU_LAUNCH_COUNT),
        "--nvtx", "--nvtx-include", f"{config.NVTX_CANDIDATE_RANGE}/",
        "--force-overwrite", "--export", str(report_path),
    ]  # fmt: skip
    return argv


def report_module_dirs(ncu: str | None = None) -> list[str]:
    """Directories that may hold Nsight Compute's `ncu_report.py`, most specific first."""
    dirs: list[str] = []
    env_dir = os.environ.get("KA_NCU_REPORT_PYTHON")
    if env_dir:
        dirs.append(env_dir)
    binary = ncu or ncu_available()
    if binary:
        real = Path(binary).resolve()
        for base in (real.parent, real.parent.parent, *real.parents[:3]):
            dirs.append(str(base / "extras" / "python"))
    for pattern in NCU_REPORT_MODULE_GLOBS:
        dirs.extend(sorted(glob.glob(pattern), reverse=True))  # newest version first
    seen: list[str] = []
    for d in dirs:
        if d not in seen and Path(d, "ncu_report.py").is_file():
            seen.append(d)
    return seen


def _read_with_module(report_path: Path, module_dir: str) -> dict:
    argv = [sys.executable, "-m", "builder.profile.ncu_reader", str(report_path), module_dir]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(config.REPO_ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=config.NCU_PARSE_TIMEOUT_S, env=env)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"ncu_report reader exited with {proc.returncode}: {tail[0][:300]}")
    return json.loads(proc.stdout)


def _read_with_csv(report_path: Path, ncu: str) -> dict:
    argv = [ncu, "--import", str(report_path), "--csv", "--page", "details", "--print-units", "base"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=config.NCU_PARSE_TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeError(f"ncu --import exited with {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return parse_details_csv(proc.stdout)


def parse_report(report_path: str | Path) -> dict:
    """Per-kernel entries of a report; {"error": reason} when it cannot be read.

    `report_path` may also be a CSV export of the details page (`ncu --import R --csv --page details`).
    """
    path = Path(report_path)
    if not path.is_file():
        return {"error": f"ncu report not written ({path.name})"}
    if path.suffix == ".csv":
        return _finish(parse_details_csv(path.read_text(errors="replace")))
    failures: list[str] = []
    for module_dir in report_module_dirs():
        try:
            return _finish(_read_with_module(path, module_dir))
        except (RuntimeError, ValueError, OSError, subprocess.SubprocessError) as exc:
            failures.append(f"ncu_report ({module_dir}): {exc}")
    ncu = ncu_available()
    if ncu is None:
        return {"error": "; ".join([*failures, "no ncu_report module and " + NCU_MISSING]) or NCU_MISSING}
    try:
        profile = _finish(_read_with_csv(path, ncu))
    except (RuntimeError, ValueError, OSError, subprocess.SubprocessError) as exc:
        return {"error": "; ".join([*failures, f"csv: {exc}"])[:1000]}
    if failures:
        profile["notes"] = failures
    return profile


def _finish(profile: dict) -> dict:
    """Common post-processing: library flags, bounded rules, truncation marker."""
    if "error" in profile:
        return profile
    from builder.profile.kernel_names import is_library_kernel

    kernels = profile.get("kernels") or []
    if not kernels:
        return {"error": f"ncu profiled no kernel inside the '{config.NVTX_CANDIDATE_RANGE}' range"}
    for kernel in kernels:
        kernel["library"] = is_library_kernel(kernel.get("name") or "")
        kernel["rules"] = (kernel.get("rules") or [])[: config.NCU_RULES_PER_KERNEL]
    profile["tool"] = "ncu"
    profile["launch_count_limit"] = config.NCU_LAUNCH_COUNT
    profile["truncated"] = len(kernels) >= config.NCU_LAUNCH_COUNT
    profile["clock_control"] = "none"
    return profile


def collect(
    report_path: str | Path, *, timed_out: bool = False, returncode: int | None = 0, stderr_tail: str = ""
) -> dict:
    """The ncu field after the profiled child ran: a parsed report, or why there is none."""
    if ncu_available() is None:
        return {"error": NCU_MISSING}
    if timed_out:
        return {"error": f"ncu run timed out after {config.NCU_TIMEOUT_S:g} s"}
    path = Path(report_path)
    if not path.is_file():
        reason = (stderr_tail or "").strip().splitlines()
        detail = next((line for line in reversed(reason) if "==ERROR==" in line), reason[-1] if reason else "")
        return {"error": f"ncu wrote no report (exit {returncode}){': ' + detail[:300] if detail else ''}"}
    return parse_report(path)


def promote(profile: dict | None) -> dict:
    """Record columns from a parsed profile: duration sum, duration-weighted %, max registers."""
    columns = dict.fromkeys(("ncu_duration_ms", "ncu_sm_pct", "ncu_dram_pct", "ncu_occupancy_pct", "ncu_registers"))
    kernels = [k for k in (profile or {}).get("kernels") or [] if isinstance(k, dict)]
    if not kernels or "error" in (profile or {}):
        return columns
    durations = [k.get("duration_ms") for k in kernels if isinstance(k.get("duration_ms"), (int, float))]
    if durations:
        columns["ncu_duration_ms"] = float(sum(durations))

    def weighted(key: str) -> float | None:
        pairs = [
            (float(k[key]), float(k.get("duration_ms") or 0.0)) for k in kernels if isinstance(k.get(key), (int, float))
        ]
        if not pairs:
            return None
        total_weight = sum(w for _, w in pairs)
        if total_weight <= 0:  # no durations: plain mean rather than nothing
            return sum(v for v, _ in pairs) / len(pairs)
        return sum(v * w for v, w in pairs) / total_weight

    columns["ncu_sm_pct"] = weighted("sm_pct")
    columns["ncu_dram_pct"] = weighted("dram_pct")
    columns["ncu_occupancy_pct"] = weighted("occupancy_pct")
    registers = [int(k["registers"]) for k in kernels if isinstance(k.get("registers"), (int, float))]
    columns["ncu_registers"] = max(registers) if registers else None
    return columns
