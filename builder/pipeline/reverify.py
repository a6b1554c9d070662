"""The re-verification report: what an archive said of its kernels against what this machine finds.

Pure functions from the re-verified records (and, for our own archive, the verdicts it stored) to a report
dict and its Markdown; `kernel-archive reverify` (builder/pipeline/reverify_run.py) runs the verification.

The old verdict of a kernel is the stored record's (`status`, `flags`, `speedup_eager`) when the archive is
ours; a foreign archive only claims correct or not (`claimed_correct`, `claimed_speedup`), so its verdicts
are compared as correct / not correct and it has no flags to compare.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from builder import config
from schemas import STATUSES

NOT_CORRECT = "not_correct"  # a claim-only archive's verdict for anything but correct
UNKNOWN = "unknown"  # no verdict or claim stored: not counted in the agreement


@dataclass(frozen=True)
class OldVerdict:
    status: str  # a status, NOT_CORRECT (claim only) or UNKNOWN
    flags: tuple[str, ...] | None  # None when the archive stores no flags
    speedup: float | None
    from_record: bool  # our own stored record (full status) rather than a claim
    timing_method: str | None = None  # how the stored speedup was measured (ours only)


def _get(record: Any, name: str) -> Any:
    return record.get(name) if isinstance(record, Mapping) else getattr(record, name, None)


def _number(value: Any) -> float | None:
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) and number > 0 else None


def old_verdict(new_record: Any, recorded: Mapping[str, Any] | None) -> OldVerdict:
    """What the archive said of the kernel `new_record` re-verified."""
    if recorded is not None:
        flags = tuple(sorted(recorded.get("flags") or ()))
        return OldVerdict(recorded.get("status") or UNKNOWN, flags, _number(recorded.get("speedup_eager")), True,
                          recorded.get("timing_method"))  # fmt: skip
    claimed = _get(new_record, "claimed_correct")
    status = UNKNOWN if claimed is None else ("correct" if claimed else NOT_CORRECT)
    return OldVerdict(status, None, _number(_get(new_record, "claimed_speedup")), False)


def verdicts_agree(old: OldVerdict, new_status: str) -> bool | None:
    """None when the archive said nothing to compare with."""
    if old.status == UNKNOWN:
        return None
    if old.from_record:
        return old.status == new_status
    return (old.status == "correct") == (new_status == "correct")


def speedup_ratio(old: OldVerdict, new_status: str, new_speedup: Any) -> float | None:
    """New over old speedup for a kernel correct both times with both speedups measured, else None."""
    new = _number(new_speedup)
    if old.status != "correct" or new_status != "correct" or old.speedup is None or new is None:
        return None
    return new / old.speedup


def same_method(old: str | None, new: str | None) -> bool | None:
    """Whether two records' speedups were measured the same way: call and block counts aside, and how the same rule
    came out (the window ended early once settled, eager held to the clean one, a second look). None when either
    does not say."""
    if not old or not new:
        return None
    return _method_rule(old) == _method_rule(new)


def _method_rule(method: str) -> str:
    clauses = [c for c in method.split("; ") if not c.startswith(config.TIMING_OUTCOME_CLAUSES)]
    return re.sub(r"\d+", "N", "; ".join(clauses))


def _first_line(text: str | None) -> str | None:
    lines = (text or "").strip().splitlines()
    return lines[0][: config.REVERIFY_ERROR_CHARS] if lines else None


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _half_ratio(record: Any, recorded: Mapping[str, Any] | None, name: str) -> float | None:
    """New / old of one stored time (`runtime_ms` or `eager_ms`); None where either side lacks it."""
    if recorded is None:
        return None
    new_value, old_value = _number(_get(record, name)), _number(recorded.get(name))
    return None if new_value is None or old_value is None else new_value / old_value


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _quantiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    points = np.quantile(np.asarray(values, dtype=float), config.REVERIFY_QUANTILES)
    return {
        f"p{round(q * 100):02d}": round(float(v), 4) for q, v in zip(config.REVERIFY_QUANTILES, points, strict=True)
    }


def build_report(
    new_records: Iterable[Any],
    recorded: Mapping[tuple[str, str], Mapping[str, Any]],
    context: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The report dict (JSON-ready). `recorded`: (task id, kernel id) -> the stored record's fields, for
    archives of ours; `context` (dataset, backend, selection, ...) is copied in as is."""
    tolerance = config.REVERIFY_SPEEDUP_TOLERANCE
    confusion: dict[str, Counter] = {}
    flags_added: Counter = Counter()
    flags_removed: Counter = Counter()
    agree = compared = flags_compared = flags_changed = 0
    ratios: list[float] = []
    same_method_ratios: list[float] = []
    # The speedup's two halves, new / old: the kernel's own runtime and eager's (which of them moved).
    parts: dict[str, list[float]] = {"runtime_ms": [], "eager_ms": []}
    other_method = 0
    moved: list[dict[str, Any]] = []
    records = list(new_records)
    for record in records:
        key = (_get(record, "task_id"), _get(record, "kernel_id"))
        old = old_verdict(record, recorded.get(key))
        new_status = _get(record, "status")
        confusion.setdefault(old.status, Counter())[new_status] += 1
        same = verdicts_agree(old, new_status)
        if same is not None:
            compared += 1
            agree += same
        added: list[str] = []
        removed: list[str] = []
        if old.flags is not None:
            new_flags = set(_get(record, "flags") or ())
            added, removed = sorted(new_flags - set(old.flags)), sorted(set(old.flags) - new_flags)
            flags_compared += 1
            flags_changed += bool(added or removed)
            flags_added.update(added)
            flags_removed.update(removed)
        ratio = speedup_ratio(old, new_status, _get(record, "speedup_eager"))
        halves = {name: _half_ratio(record, recorded.get(key), name) if ratio is not None else None for name in parts}
        if ratio is not None:
            ratios.append(ratio)
            for name, half in halves.items():
                if half is not None:
                    parts[name].append(half)
            method = same_method(old.timing_method, _get(record, "timing_method"))
            other_method += method is False
            if method:
                same_method_ratios.append(ratio)
        slower_or_faster = ratio is not None and abs(ratio - 1) > tolerance
        if same is False or slower_or_faster:
            moved.append(
                {
                    "task_id": key[0],
                    "kernel_id": key[1],
                    "kernel_name": _get(record, "kernel_name"),
                    "old_status": old.status,
                    "new_status": new_status,
                    "old_speedup": old.speedup,
                    "new_speedup": _number(_get(record, "speedup_eager")),
                    "speedup_ratio": _rounded(ratio),
                    "runtime_ratio": _rounded(halves["runtime_ms"]),
                    "eager_ratio": _rounded(halves["eager_ms"]),
                    "flags_added": added,
                    "flags_removed": removed,
                    "why": "verdict" if same is False else "speedup",
                    "error": _first_line(_get(record, "error")) if same is False else None,
                }
            )
    # Verdict changes first, then the largest speedup changes.
    moved.sort(key=lambda m: (m["why"] != "verdict", -abs(math.log(m["speedup_ratio"] or 1.0)), m["task_id"]))
    within = sum(1 for r in ratios if abs(r - 1) <= tolerance)
    within_same = sum(1 for r in same_method_ratios if abs(r - 1) <= tolerance)
    report: dict[str, Any] = {
        **dict(context or {}),
        "kernels": len(records),
        "verdicts": {
            "compared": compared,
            "agree": agree,
            "agreement": _share(agree, compared),
            "old_verdicts": "stored records" if recorded else "claims (correct or not)",
            "confusion": {old: dict(sorted(new.items())) for old, new in sorted(confusion.items(), key=_old_order)},
        },
        "flags": {
            "compared": flags_compared,
            "changed": flags_changed,
            "added": dict(flags_added.most_common()),
            "removed": dict(flags_removed.most_common()),
        },
        "speedup": {
            "compared": len(ratios),
            "tolerance": tolerance,
            "within_tolerance": within,
            "share_within": _share(within, len(ratios)),
            "ratio_quantiles": _quantiles(ratios),
            # Stored speedups measured another way (an older builder, say): their ratios hold the change of method
            # as well. The held line counts every pair; these say how far the method explains what moved.
            "other_method": other_method,
            "same_method_compared": len(same_method_ratios),
            "same_method_within": within_same,
            # Which half moved: the kernel's runtime or eager's (new / old), for the pairs that store both.
            "runtime_ratio_quantiles": _quantiles(parts["runtime_ms"]),
            "runtime_within": sum(1 for r in parts["runtime_ms"] if abs(r - 1) <= tolerance),
            "eager_ratio_quantiles": _quantiles(parts["eager_ms"]),
            "eager_within": sum(1 for r in parts["eager_ms"] if abs(r - 1) <= tolerance),
            "runtime_compared": len(parts["runtime_ms"]),
            "eager_compared": len(parts["eager_ms"]),
        },
        "moved": moved,
    }
    report["held"], report["verdict"] = held(report)
    return report


def _old_order(item: tuple[str, Any]) -> tuple[int, str]:
    order = [*STATUSES, NOT_CORRECT, UNKNOWN]
    return (order.index(item[0]) if item[0] in order else len(order), item[0])


def held(report: Mapping[str, Any]) -> tuple[bool | None, str]:
    """(held, one line saying why): verdicts agree and speedups kept, per the thresholds in config."""
    agreement = report["verdicts"]["agreement"]
    share = report["speedup"]["share_within"]
    if agreement is None:
        return None, "nothing to compare: the archive stores no verdicts for the kernels re-verified"
    verdict_ok = agreement >= config.REVERIFY_HELD_VERDICT_AGREEMENT
    speed_ok = share is None or share >= config.REVERIFY_HELD_SPEEDUP_SHARE
    tol = f"±{config.REVERIFY_SPEEDUP_TOLERANCE:.0%}"
    speed_text = (
        "no speedups to compare"
        if share is None
        else f"{share:.1%} of speedups within {tol} (needs {config.REVERIFY_HELD_SPEEDUP_SHARE:.0%})"
    )
    line = f"{agreement:.1%} of verdicts agree (needs {config.REVERIFY_HELD_VERDICT_AGREEMENT:.0%}); {speed_text}"
    return verdict_ok and speed_ok, ("held: " if verdict_ok and speed_ok else "did not hold: ") + line


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, (list, tuple)):
        value = ", ".join(map(str, value)) or "-"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: Iterable[Iterable[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return lines


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def render_markdown(report: Mapping[str, Any]) -> str:
    """report.md: the verdict line, then the confusion table, flag changes, speedup ratios and what moved."""
    verdicts, flags, speedup = report["verdicts"], report["flags"], report["speedup"]
    lines = [f"# Re-verification of {report.get('dataset', 'an archive')}", ""]
    context = [(k, report[k]) for k in ("backend", "machine", "torch_version", "created_at") if report.get(k)]
    lines += [f"- {name}: {_cell(value)}" for name, value in context]
    selection = report.get("selection") or {}
    if selection:
        lines.append(
            f"- kernels: {report['kernels']} re-verified of {selection.get('importable', '?')} importable"
            f" (--tasks {_cell(selection.get('tasks'))}, --limit {_cell(selection.get('limit'))});"
            f" {selection.get('left_out', 0)} left out by the importer"
            + (f"; {selection['not_verified']} selected but not verified (the run was cut off; --report-only)"
               if selection.get("not_verified") else "")
        )  # fmt: skip
    lines += ["", f"**{report['verdict']}**", ""]
    statuses = sorted({new for row in verdicts["confusion"].values() for new in row}, key=_status_order)
    lines += [
        f"## Verdicts (old from {verdicts['old_verdicts']}; rows old, columns new)",
        "",
        *_table(
            ["old \\ new", *statuses, "total"],
            (
                [old, *(row.get(s, 0) for s in statuses), sum(row.values())]
                for old, row in verdicts["confusion"].items()
            ),
        ),
        "",
        f"{verdicts['agree']} of {verdicts['compared']} compared verdicts agree ({_percent(verdicts['agreement'])}).",
        "",
        "## Flags",
        "",
    ]
    if flags["compared"]:
        changes = sorted(set(flags["added"]) | set(flags["removed"]))
        lines.append(f"{flags['changed']} of {flags['compared']} kernels changed flags.")
        if changes:
            rows = ([f, flags["added"].get(f, 0), flags["removed"].get(f, 0)] for f in changes)
            lines += ["", *_table(["flag", "added", "removed"], rows)]
    else:
        lines.append("The archive stores no flags to compare.")
    tol = f"±{speedup['tolerance']:.0%}"
    lines += ["", "## Speedup over eager (new / old, kernels correct both times)", ""]
    if speedup["compared"]:
        quantiles = speedup["ratio_quantiles"]
        lines += [
            f"{speedup['within_tolerance']} of {speedup['compared']} within {tol} ({_percent(speedup['share_within'])}).",
            "",
            *_table(list(quantiles), [list(quantiles.values())]),
        ]
        if speedup.get("runtime_compared") or speedup.get("eager_compared"):
            runtime, eager = speedup["runtime_ratio_quantiles"], speedup["eager_ratio_quantiles"]
            lines += ["", f"Which half moved (new / old): the kernel's runtime is within {tol} for "
                      f"{speedup['runtime_within']} of {speedup['runtime_compared']}, eager's for "
                      f"{speedup['eager_within']} of {speedup['eager_compared']}.", "",
                      *_table(["", *quantiles], [["speedup", *quantiles.values()],
                                                 ["kernel runtime", *(runtime.get(q) for q in quantiles)],
                                                 ["eager", *(eager.get(q) for q in quantiles)]])]  # fmt: skip
        if speedup.get("other_method"):
            same = speedup["same_method_compared"]
            lines += ["", f"{speedup['other_method']} of these old speedups were measured by another method (their "
                      "`timing_method` differs from this run's): their ratios hold the change of method as well. "
                      + (f"Of the {same} measured the same way, {speedup['same_method_within']} are within {tol}."
                         if same else "None was measured the same way.")]  # fmt: skip
    else:
        lines.append("No kernel has a speedup on both sides.")
    moved = report["moved"]
    shown = moved[: config.REVERIFY_MOVED_SHOWN]
    lines += ["", f"## Kernels that moved ({len(moved)}: verdict changed, or speedup ratio outside {tol})", ""]
    if moved:
        header = ["task", "kernel", "name", "old", "new", "old speedup", "new speedup", "ratio", "runtime ratio",
                  "eager ratio", "flags +/-", "error"]  # fmt: skip
        rows = (
            [
                m["task_id"],
                m["kernel_id"],
                m["kernel_name"],
                m["old_status"],
                m["new_status"],
                m["old_speedup"],
                m["new_speedup"],
                m["speedup_ratio"],
                m.get("runtime_ratio"),
                m.get("eager_ratio"),
                " ".join([*(f"+{f}" for f in m["flags_added"]), *(f"-{f}" for f in m["flags_removed"])]) or None,
                m["error"],
            ]
            for m in shown
        )
        lines += _table(header, rows)
        if len(moved) > len(shown):
            lines += ["", f"... and {len(moved) - len(shown)} more in report.json."]
    else:
        lines.append("None.")
    notes = report.get("notes") or []
    if notes:
        lines += ["", f"## Left out by the importer ({len(notes)})", ""]
        lines += [f"- {_cell(n)}" for n in notes[: config.REVERIFY_NOTES_SHOWN]]
        if len(notes) > config.REVERIFY_NOTES_SHOWN:
            lines.append(f"- ... and {len(notes) - config.REVERIFY_NOTES_SHOWN} more in report.json")
    return "\n".join(lines) + "\n"


def _status_order(status: str) -> tuple[int, str]:
    return _old_order((status, None))
