"""Two builds of the same candidates, record against record: the same (task, kernel) pairs stored, the same
verdicts and flags, and correct kernels' speedups over eager within a tolerance of each other. For an executor or
a GPU count against another (`--executor ray` against `local`, four GPUs against one) on one machine.

    python benchmarks/compare_builds.py BUILD_A BUILD_B [--tolerance T] [--json OUT]

Prints one line a figure and, where they differ, the pairs that do; exit 0 either way (a comparison, not a check),
2 for a directory that holds no build.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from builder import config  # noqa: E402
from builder.errors import UsageError  # noqa: E402
from builder.pipeline.store import Store  # noqa: E402


def compared_fields(record) -> dict:
    """What two judgements of one kernel must share: its status and flags, and (correct) its speedup over eager."""
    return {"status": record.status, "flags": sorted(record.flags or []), "speedup": record.speedup_eager}


def load(build_dir: Path) -> dict[tuple[str, str], dict]:
    """(task_id, kernel_id) -> the fields compared, for every record the build stored."""
    with Store.open_existing(build_dir) as store:
        records = store.records_for(store.done_keys())
    return {(r.task_id, r.kernel_id): compared_fields(r) for r in records}


def compare(first: dict, second: dict, tolerance: float = config.REVERIFY_SPEEDUP_TOLERANCE) -> dict:
    """Two judgements of the same kernels ({key: compared_fields}), kernel by kernel."""
    both = sorted(set(first) & set(second))
    status_differs = [key for key in both if first[key]["status"] != second[key]["status"]]
    flags_differ = [key for key in both if key not in status_differs and first[key]["flags"] != second[key]["flags"]]
    timed = [key for key in both if first[key]["status"] == second[key]["status"] == "correct"
             and first[key]["speedup"] and second[key]["speedup"]]  # fmt: skip
    apart = {key: second[key]["speedup"] / first[key]["speedup"] - 1 for key in timed}
    outside = sorted(key for key, gap in apart.items() if abs(gap) > tolerance)
    return {"in_both": len(both), "only_first": sorted(set(first) - set(second)),
            "only_second": sorted(set(second) - set(first)), "status_differs": status_differs,
            "flags_differ": flags_differ, "correct_in_both": len(timed), "speedups_outside": outside,
            "largest_gap": max((abs(gap) for gap in apart.values()), default=0.0), "tolerance": tolerance,
            "statuses": count_statuses(first)}  # fmt: skip


def count_statuses(records: dict) -> dict[str, int]:
    counts: dict[str, int] = {}
    for fields in records.values():
        counts[fields["status"]] = counts.get(fields["status"], 0) + 1
    return dict(sorted(counts.items()))


def lines(result: dict) -> list[str]:
    def pairs(keys: list) -> str:
        return ", ".join(f"{task}:{kernel}" for task, kernel in keys[:10]) + (" ..." if len(keys) > 10 else "")

    out = [f"records in both: {result['in_both']} (first build's statuses: {result['statuses']}); only in the first: "
           f"{len(result['only_first'])}, only in the second: {len(result['only_second'])}",
           f"same status: {result['in_both'] - len(result['status_differs'])} of {result['in_both']}; same flags "
           f"where the status agrees: {result['in_both'] - len(result['status_differs']) - len(result['flags_differ'])}",
           f"correct in both: {result['correct_in_both']}; speedups over eager within "
           f"{result['tolerance']:.0%}: {result['correct_in_both'] - len(result['speedups_outside'])}, largest gap "
           f"{result['largest_gap']:.1%}"]  # fmt: skip
    for label in ("only_first", "only_second", "status_differs", "flags_differ", "speedups_outside"):
        if result[label]:
            out.append(f"{label.replace('_', ' ')}: {pairs(result[label])}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    parser.add_argument("--tolerance", type=float, default=config.REVERIFY_SPEEDUP_TOLERANCE,
                        help=f"relative speedup gap allowed ({config.REVERIFY_SPEEDUP_TOLERANCE})")  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write the comparison here")
    args = parser.parse_args(argv)
    try:
        result = compare(load(args.first), load(args.second), args.tolerance)
    except UsageError as exc:
        print(f"compare_builds: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines(result)))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
