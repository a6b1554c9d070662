"""Profiles of a candidate: Nsight Compute (ncu.py), torch.profiler (torch_profile.py), clang-tidy
(clang_tidy.py), and `profile_record_fields`, which the verification engine calls once per candidate
to fill the record's three JSON fields and the promoted columns.

A profiler that is missing, fails or times out leaves {"error": reason} in its field; nothing here
raises for a profiler failure, so profiling can never fail a build.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from builder import config
from schemas import fields_in_group

PROFILE_FIELDS = tuple(fields_in_group("profiles"))  # what profile_record_fields fills: the schema's group


def _json_text(value: dict) -> str:
    try:
        return json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return json.dumps({"error": f"profile not serialisable: {exc}"})


def _guarded(label: str, produce) -> dict:
    """Run one profiler step; any exception becomes {"error": ...} instead of escaping."""
    try:
        value = produce()
    except Exception as exc:  # noqa: BLE001 - the contract: a profiler never fails the build
        return {"error": f"{label} failed: {type(exc).__name__}: {exc}"[: config.ERROR_TEXT_BYTES]}
    if not isinstance(value, dict):
        return {"error": f"{label} returned {type(value).__name__}, not an object"}
    return value


def ncu_field(
    backend: str,
    report_path: str | Path | None = None,
    *,
    ncu_error: str | None = None,
    timed_out: bool = False,
    returncode: int | None = 0,
    stderr_tail: str = "",
) -> dict:
    """The ncu profile for a candidate: parsed report, or the reason there is none."""
    from builder.profile import ncu

    if backend != "cuda":
        return {"error": f"ncu profiles the CUDA backend only (backend={backend})"}
    if ncu_error:
        return {"error": ncu_error}
    if report_path is None:
        return {"error": ncu.NCU_MISSING if ncu.ncu_available() is None else "ncu was not run"}
    return _guarded(
        "ncu", lambda: ncu.collect(report_path, timed_out=timed_out, returncode=returncode, stderr_tail=stderr_tail)
    )


def clang_tidy_field(source: str, language: str, arch: str | None = None) -> dict:
    from builder.profile.clang_tidy import run_clang_tidy

    return _guarded("clang-tidy", lambda: run_clang_tidy(source, language, arch=arch))


def profile_record_fields(
    source: str,
    language: str,
    *,
    backend: str,
    torch_profile: dict | None = None,
    torch_profile_missing: str = "the candidate did not complete a profiled call",
    ncu_report_path: str | Path | None = None,
    ncu_error: str | None = None,
    ncu_timed_out: bool = False,
    ncu_returncode: int | None = 0,
    ncu_stderr_tail: str = "",
    arch: str | None = None,
    clang_tidy: dict | None = None,
) -> dict[str, Any]:
    """Record fields for one candidate's profiles (JSON text + promoted columns).

    - `torch_profile`: the child's result["torch_profile"] (None when the child never got there;
      `torch_profile_missing` then says why).
    - `ncu_report_path` etc.: what the sandboxed `ncu ... child` run left behind (see ncu.collect).
    - `clang_tidy`: pass an already computed result (e.g. from the compile stage) to avoid a re-run.
    """
    from builder.profile.ncu import promote

    tidy = clang_tidy if isinstance(clang_tidy, dict) else clang_tidy_field(source, language, arch)
    ncu_profile = ncu_field(
        backend,
        ncu_report_path,
        ncu_error=ncu_error,
        timed_out=ncu_timed_out,
        returncode=ncu_returncode,
        stderr_tail=ncu_stderr_tail,
    )
    torch_summary = torch_profile if isinstance(torch_profile, dict) else {"error": torch_profile_missing}
    fields: dict[str, Any] = {
        "ncu_profile": _json_text(ncu_profile),
        "torch_profile": _json_text(torch_summary),
        "clang_tidy": _json_text(tidy),
    }
    promoted = _guarded("ncu promote", lambda: promote(ncu_profile))
    fields.update(promote(None) if "error" in promoted else promoted)
    own = torch_summary.get("own_fraction")
    fields["torch_own_fraction"] = float(own) if isinstance(own, (int, float)) and not isinstance(own, bool) else None
    warnings = tidy.get("warnings")
    fields["clang_tidy_warnings"] = warnings if isinstance(warnings, int) and "error" not in tidy else None
    return fields


def profiles_from_record_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """{"ncu", "torch_profile", "clang_tidy"} objects from a record's JSON-text fields."""
    out: dict[str, Any] = {}
    for key, field in (("ncu", "ncu_profile"), ("torch_profile", "torch_profile"), ("clang_tidy", "clang_tidy")):
        text = fields.get(field)
        try:
            out[key] = json.loads(text) if text else {"error": "not profiled"}
        except (TypeError, ValueError):
            out[key] = {"error": "stored profile is not valid JSON"}
    return out
