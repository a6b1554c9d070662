"""`kernel-archive profile CANDIDATE --task TASK`: print a candidate's three profiles.

The candidate runs only in the verification engine's sandboxed children (compile_candidate +
evaluate_compiled with profile=True); this command then prints the record's ncu / torch-profiler /
clang-tidy fields. clang-tidy only reads the source, so it also works when the engine cannot run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

from builder.cli.candidate_args import resolve_candidate


def collect_profiles(candidate, task, backend: str) -> dict[str, Any]:
    """{"ncu", "torch_profile", "clang_tidy"} for one candidate, via the sandboxed verification engine."""
    from builder.profile import clang_tidy_field, profiles_from_record_fields
    from builder.verify.engine.one_kernel import compile_candidate
    from builder.verify.engine.verifier import evaluate_compiled
    from builder.verify.options import VerifyOptions

    options = VerifyOptions(backend=backend, profile=True)
    compiled = compile_candidate(candidate, task, options)
    record = evaluate_compiled(compiled, candidate, task, options)
    profiles = profiles_from_record_fields(vars(record))
    if profiles["clang_tidy"].get("error") == "not profiled" and candidate.language in ("cuda", "cpp"):
        profiles["clang_tidy"] = clang_tidy_field(candidate.source, candidate.language)
    if profiles["ncu"].get("error") == "not profiled":
        why = "the cpu backend has no ncu" if backend == "cpu" else f"candidate status {record.status}"
        profiles["ncu"] = {"error": f"ncu not run: {why}"}
    if profiles["torch_profile"].get("error") == "not profiled":
        profiles["torch_profile"] = {"error": f"no profiled call (candidate status {record.status})"}
    profiles["status"] = record.status
    return profiles


def _print_summary(profiles: dict[str, Any]) -> None:
    from rich.console import Console

    console = Console()
    if "status" in profiles:
        console.print(f"candidate status: {profiles['status']}", markup=False)
    ncu = profiles["ncu"]
    if "error" in ncu:
        console.print(f"ncu: {ncu['error']}", markup=False)
    else:
        for k in ncu.get("kernels", []):
            console.print(
                f"ncu: {k['name'][:80]}  {k.get('duration_ms')} ms  sm {k.get('sm_pct')}%  dram {k.get('dram_pct')}%"
                f"  occupancy {k.get('occupancy_pct')}%  regs {k.get('registers')}",
                markup=False,
            )
    torch_profile = profiles["torch_profile"]
    if "error" in torch_profile:
        console.print(f"torch profiler: {torch_profile['error']}", markup=False)
    else:
        console.print(f"torch profiler: own fraction {torch_profile.get('own_fraction')}", markup=False)
        for row in (torch_profile.get("kernels") or torch_profile.get("operators") or [])[:5]:
            console.print(f"  {row['name'][:80]}  x{row['count']}", markup=False)
    tidy = profiles["clang_tidy"]
    if "error" in tidy:
        console.print(f"clang-tidy: {tidy['error']}", markup=False)
    else:
        console.print(f"clang-tidy ({tidy['mode']}, {tidy['seconds']} s): {tidy['counts'] or 'clean'}", markup=False)
        for diag in tidy["diagnostics"][:20]:
            console.print(
                f"  {diag['line']}:{diag['column']} {diag['severity']} {diag['message']} [{diag['check']}]",
                markup=False,
            )


def profile(
    candidate: Path = typer.Argument(..., help="Candidate file: .cu (CUDA), .cpp (CPU extension) or .py (ModelNew)."),
    task: str = typer.Option(..., "--task", help="Suite id like 1/3, or a task file path."),
    backend: Optional[str] = typer.Option(None, "--backend", help="cuda or cpu (default: cuda when a GPU is visible)."),
    suite: Optional[Path] = typer.Option(None, "--suite", help="External KernelBench-style suite for a TASK id."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object {ncu, torch_profile, clang_tidy}."),
) -> None:
    """Profile one candidate (Nsight Compute, torch profiler, clang-tidy) and print the profiles."""

    chosen, chosen_task, backend = resolve_candidate(candidate, task, suite, backend)
    profiles = collect_profiles(chosen, chosen_task, backend)
    if as_json:
        typer.echo(json.dumps({k: profiles[k] for k in ("ncu", "torch_profile", "clang_tidy")}, indent=1))
    else:
        _print_summary(profiles)


def register(app: typer.Typer) -> None:
    app.command("profile")(profile)
