"""Verdict assembly: status + flags + measurements -> one KernelRecord (trusted parent side).

The child's result is untrusted input: every value is type-checked here before it reaches a record,
flags outside the vocabulary are dropped, and disqualifying flags override a claimed `correct`. A CUDA runtime
measured below its physical floor (`floor.py`, computed here from the clean reference's sizes) is one of them:
`implausible_runtime`.
"""

from __future__ import annotations

import json
import math
import statistics
from datetime import datetime, timezone
from typing import Any

from builder import config
from builder.candidates import Candidate
from builder.tasks import Task
from builder.verify.judge import floor
from schemas import STATUSES, KernelRecord, disqualifying_flags, flag_vocabulary

RUNTIME_FIELDS = {"median_ms": "runtime_ms", "mean_ms": "runtime_mean_ms", "std_ms": "runtime_std_ms",
                  "min_ms": "runtime_min_ms", "max_ms": "runtime_max_ms"}  # fmt: skip
SEED_POLICY = f"secrets.randbits({config.SEED_BITS}) per build"


def final_status(status: str, flags: set[str] | list[str]) -> str:
    """A disqualifying flag turns `correct` into `incorrect`; other statuses stand."""
    if status == "correct" and set(flags) & disqualifying_flags():
        return "incorrect"
    return status


def ranking_eligible(status: str, flags: set[str] | list[str]) -> bool:
    return status == "correct" and not flags


def bounded(text: str | None, limit: int = config.ERROR_TEXT_BYTES) -> str | None:
    if text is None:
        return None
    data = str(text).encode()
    if len(data) <= limit:
        return str(text)
    return data[: limit - 6].decode("utf-8", errors="ignore") + "\n[...]"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _json_text(value: Any) -> str | None:
    if value is None:
        return None
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return json.dumps({"error": "unserialisable profile"})


def known_flags(flags: Any) -> set[str]:
    if not isinstance(flags, (list, tuple, set)):
        return set()
    vocabulary = flag_vocabulary()
    return {flag for flag in flags if isinstance(flag, str) and flag in vocabulary}


def flag_notes(flags: set[str], parent: dict[str, str], child: Any) -> str | None:
    """JSON text {flag: why} for the record's flags: what the parent found (source, extension imports) first, then
    the child's claim (untrusted text: kept only for a flag the record has, each bounded)."""
    claims = child if isinstance(child, dict) else {}
    notes = {}
    for flag in sorted(flags):
        parts = [str(why) for why in (parent.get(flag), claims.get(flag)) if isinstance(why, str) and why]
        if parts:
            notes[flag] = bounded("; ".join(dict.fromkeys(parts)), config.FLAG_NOTE_CHARS)
    return json.dumps(notes) if notes else None


def speedup(baseline_ms: float | None, runtime_ms: float | None) -> float | None:
    if baseline_ms is None or not runtime_ms or runtime_ms <= 0:
        return None
    return baseline_ms / runtime_ms


def ratio_spread(ratios: Any) -> float | None:
    """Interquartile range of the per-block speedups (None for fewer than two finite ones)."""
    if not isinstance(ratios, list):
        return None
    values = sorted(v for v in (_number(r) for r in ratios) if v is not None)
    if len(values) < 2:
        return None
    quartiles = statistics.quantiles(values, n=4, method="inclusive")
    return quartiles[2] - quartiles[0]


def base_fields(candidate: Candidate, task: Task, backend: str) -> dict[str, Any]:
    """Identity, provenance and code: everything known before anything runs."""
    fields = candidate.provenance_fields()
    fields.update(
        task_id=task.id,
        level=task.level,
        task_number=task.number,
        op_name=task.name,
        op_category=task.op_category,
        suite=task.suite,
        backend=backend,
        reference_module_code=task.source,
        reference_functional_code=task.functional_source(),
        seed_policy=SEED_POLICY,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    return fields


def assemble_record(
    base: dict[str, Any],
    *,
    status: str,
    error: str | None = None,
    result: dict[str, Any] | None = None,
    static_flags: set[str] = frozenset(),
    static_notes: dict[str, str] | None = None,
    baseline: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> KernelRecord:
    """Build the record. `result` is the child's result JSON (evaluate mode), `baseline` the cached
    baseline JSON; `extra` holds fields set by the engine (environment, seeds, isolation, timings);
    `static_notes` the flags the parent found itself (`static_flags` without their notes), each with why."""
    fields = dict(base)
    fields.update(extra or {})
    static_notes = static_notes or {}
    flags = set(static_flags) | known_flags(list(static_notes))
    result = result or {}
    if result:
        flags |= known_flags(result.get("flags"))
        for key in ("max_diff", "mean_diff"):
            fields[key] = _number(result.get(key))
        fields["trials"] = _integer(result.get("trials"))
        runtime = result.get("runtime") if isinstance(result.get("runtime"), dict) else {}
        for key, name in RUNTIME_FIELDS.items():
            fields[name] = _number(runtime.get(key))
        fields["runtime_n"] = _integer(runtime.get("n"))
        if isinstance(result.get("timing_method"), str):
            fields["timing_method"] = result["timing_method"]
        if result.get("torch_profile") is not None:
            fields["torch_profile"] = _json_text(result["torch_profile"])
        fields["torch_own_fraction"] = _number(result.get("own_kernel_fraction"))
        loaded = _integer(result.get("reference_state_loaded"))
        fields["reference_state_loaded"] = loaded if loaded is not None and loaded >= 0 else None
    if baseline:
        fields["eager_clean_ms"] = _number(baseline.get("eager_ms"))
        fields["eager_ms"] = fields["eager_clean_ms"]
        fields["compile_ms"] = _number(baseline.get("compile_ms"))
    window = result.get("eager_window") if isinstance(result.get("eager_window"), dict) else {}
    if _number(window.get("median_ms")) is not None and fields.get("runtime_ms") is not None:
        # timed beside the kernel: the speedup's basis, unless held to the clean eager (`held_to_clean_eager`)
        fields["eager_ms"] = _number(window.get("basis_ms", window.get("median_ms")))
        fields["speedup_eager_iqr"] = ratio_spread(result.get("speedup_blocks"))
    fields["speedup_eager"] = speedup(fields.get("eager_ms"), fields.get("runtime_ms"))
    fields["speedup_compile"] = speedup(fields.get("compile_ms"), fields.get("runtime_ms"))
    if fields["speedup_eager"] is not None and fields["speedup_eager"] > config.SUSPICIOUS_SPEEDUP:
        flags.add("suspicious_speedup")
    fields["floor_ms"] = _number(fields.get("floor_ms"))
    fields["speed_of_light"], implausible = floor.judge_runtime(fields.get("runtime_ms"), fields["floor_ms"])
    if implausible and status == "correct":
        flags.add("implausible_runtime")
        error = error or f"implausible_runtime: {implausible}"
    if status not in STATUSES:
        error = f"child reported an unknown status {status!r}" + (f": {error}" if error else "")
        status = "crash"
    status = final_status(status, flags)
    fields.update(
        status=status,
        flags=sorted(flags),
        flag_notes=flag_notes(flags, static_notes, result.get("flag_notes")),
        ranking_eligible=ranking_eligible(status, flags),
        error=bounded(error),
    )
    return KernelRecord(**{k: v for k, v in fields.items() if k in KernelRecord.__dataclass_fields__})
