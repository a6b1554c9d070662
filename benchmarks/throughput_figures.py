"""The throughput bench's figures from what a run left: an engine's totals as lines, the rate between two records,
how long the last engine worked alone, copies' agreement, and the printing of a figures dict."""

from __future__ import annotations

import statistics


def engine_lines(totals: dict, started: float) -> list[str]:
    """An engine's totals as the bench's figures: its start, references, baselines and device time per kernel."""
    n = max(1, int(totals.get("records") or 0))
    gate = totals.get("gate") or {}
    owned = gate.get("by_purpose") or {}
    ready = [at - started for at in totals.get("reference_ready_at") or []]
    references = max(1, int(totals.get("references") or 0))
    children = totals.get("baseline_children_s") or []
    last = totals.get("last_record_at")
    adopted = (
        f", {totals['references_adopted']} adopted from another engine" if totals.get("references_adopted") else ""
    )
    return [f"started at {totals.get('started_at', started) - started:.1f} s; {totals.get('records')} records"
            + (f", the last at {last - started:.1f} s" if isinstance(last, (int, float)) else "")
            + ("; stopped before its stream's end" if totals.get("stopped") else ""),
            milestone_line(totals.get("milestones") or {}, started),
            f"clean references: {totals.get('references')}, {totals.get('reference_s', 0.0) / references:.2f} s each"
            f"{adopted}; ready at {ready_times(ready)} s",
            f"baseline children: {len(children)}, wall {statistics.mean(children) if children else float('nan'):.1f} s"
            f" each; measured baselines {owned.get('baseline', 0.0):.1f} s of its device",
            f"device s/kernel: timing windows {owned.get('timing', 0.0) / n:.2f}, held shared "
            f"{gate.get('shared_s', 0.0) / n:.2f}, owners waiting {gate.get('owner_wait_s', 0.0) / n:.2f}, unowned "
            f"while an owner waited {gate.get('drain_s', 0.0) / n:.2f}, held by nobody {gate.get('unheld_s', 0.0) / n:.2f};"
            f" checks yielded per kernel {gate.get('yields', 0) / n:.2f}; stopping and continuing members "
            f"{gate.get('stopping_s', 0.0) / n * 1000:.1f} ms",
            f"children that waited for room on the scratch disk: {totals.get('disk_room_waits', 0)}, "
            f"{totals.get('disk_room_waited_s', 0.0):.1f} s in all"]  # fmt: skip


def ready_times(ready: list[float]) -> str:
    """When an engine's references were ready: the first four (its start) and the last two (a hand-back's)."""
    shown = [f"{at:.1f}" for at in sorted(ready)]
    return ", ".join(shown) if len(shown) <= 6 else f"{', '.join(shown[:4])} ... {', '.join(shown[-2:])}"


def alone_at_the_end(engines: list[dict]) -> float:
    """Seconds from the first engine's last record to the last one's: how long the last engine worked alone at the
    end of a run (nan below two engines with a last record)."""
    ends = [t["last_record_at"] for t in engines if isinstance(t.get("last_record_at"), (int, float))]
    return max(ends) - min(ends) if len(ends) > 1 else float("nan")


def middle_rate(times: list[float], low: float = 0.25, high: float = 0.75) -> float:
    """Kernels/hour between the record at `low` and the one at `high` of a run's records (their times, in order):
    the rate without the start and the last records, where several GPUs and one differ most."""
    first, last = int(len(times) * low), int(len(times) * high) - 1
    if last <= first or times[last] <= times[first]:
        return float("nan")
    return (last - first) / (times[last] - times[first]) * 3600


def milestone_line(marks: dict[str, float], started: float) -> str:
    """A start's milestones (`builder.verify.milestones`) in the order they were reached, seconds from `started`."""
    if not marks:
        return "milestones: none"
    return "milestones: " + ", ".join(
        f"{name} {at - started:.1f}" for name, at in sorted(marks.items(), key=lambda m: m[1])
    )


def copy_agreement(records) -> dict[str, float]:
    """The mix repeats each bundled kernel as copies (`corpus`): how many kernels got one verdict in every copy,
    and how many correct copies' speedups over eager lie within 5 % of their kernel's median (a loaded machine
    must move neither)."""
    groups: dict[tuple[str, str], list] = {}
    for record in records:
        groups.setdefault((record.task_id, record.kernel_name.rsplit("-", 1)[0]), []).append(record)
    repeated = [copies for copies in groups.values() if len(copies) > 1]
    if not repeated:
        return {}
    within = total = 0
    for copies in repeated:
        speedups = [r.speedup_eager for r in copies if r.status == "correct" and r.speedup_eager]
        if len(speedups) > 1:
            median = statistics.median(speedups)
            within += sum(abs(s / median - 1) <= 0.05 for s in speedups)
            total += len(speedups)
    return {"copies: kernels with copies": len(repeated),
            "copies: kernels with one verdict in every copy": sum(len({r.status for r in c}) == 1 for c in repeated),
            "copies: correct copies timed": total,
            "copies: speedups within 5 % of their kernel's median": within}  # fmt: skip


def show(figures: dict[str, float]) -> None:
    for name, value in figures.items():
        print(f"  {name:42s} {value:10.2f}", flush=True)
