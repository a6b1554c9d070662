"""The README's figures, written from the files that hold them, so that they cannot go stale.

    python benchmarks/readme_figures.py           # rewrite the block of README.md between the markers
    python benchmarks/readme_figures.py --check   # exit 1 when README.md's block is not what the files give

The block lies between `<!-- figures:begin -->` and `<!-- figures:end -->`. Its lines come from:

- `data/sample/` (the sample archive's Parquet) and `schemas/kernel_record.json`: how many kernels and tasks, the
  builder commits that verified them, and the record fields of the current schema the sample lacks;
- every `benchmarks/reports/*.json`, one a benchmark run: `kind`, `title`, `date`, `commit`, `gpu`, `command`,
  and the figures. A `reverify` report holds the keys of `kernel-archive reverify`'s report.json (`kernels`,
  `verdicts`, `speedup`); a `throughput`, `scaling`, `cold_scaling` or `kernelbench` report holds `figures` (a
  `kernelbench` report: this engine's pass and KernelBench's own flow over the first of its kernels). Reports transcribed
  from a log rather than written by their command say so in `transcribed`.

docs/benchmarks.md lists the commands; a test runs `--check` against the real README.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- figures:begin -->", "<!-- figures:end -->"
SAMPLE_COLUMNS = ["task_id", "status", "builder_version", "gpu_name"]


def _count(value: int | float) -> str:
    return f"{value:,}"


def _range(values: list[int]) -> str:
    low, high = min(values), max(values)
    return _count(low) if low == high else f"{_count(low)}-{_count(high)}"


def reverify_line(report: dict) -> str:
    verdicts, speedup = report["verdicts"], report["speedup"]
    return (
        f"**Sample re-verification** ({report['title']}): {report['kernels']} kernels re-verified, verdicts "
        f"{verdicts['agree']} of {verdicts['compared']} agree, speedups over eager {speedup['within_tolerance']} of "
        f"{speedup['compared']} within ±{speedup['tolerance']:.0%} of the stored ones"
    )


def throughput_line(report: dict) -> str:
    f = report["figures"]
    return (
        f"**Throughput, {report['title']}**: {_count(f['kernels_per_hour'])} verified kernels/hour over "
        f"{f['evaluations']} evaluations, {_count(f['after_first_record_per_hour'])}/h after the first evaluated "
        f"record ({f['mix']})"
    )


def scaling_line(report: dict) -> str:
    runs = report["figures"]["runs"]
    ratios = ", ".join(f"{run['ratio']:.2f}x" for run in runs)
    return (
        f"**Scaling, {report['title']}**: {ratios} the one-GPU rate over the run in {len(runs)} runs "
        f"({_range([r['two_gpus_per_hour'] for r in runs])} against {_range([r['one_gpu_per_hour'] for r in runs])} "
        f"kernels/hour; {report['figures']['mix']})"
    )


def cold_scaling_line(report: dict) -> str:
    f = report["figures"]
    first = f["first_evaluated_record_s"]
    return (
        f"**Scaling from a cold start, {report['title']}**: {f['ratio']:.2f}x the one-GPU rate over the run "
        f"({_count(f['several_gpus_per_hour'])} against {_count(f['one_gpu_per_hour'])} kernels/hour; first evaluated "
        f"record at {first['several_gpus']} s against {first['one_gpu']} s), {f['ratio_after_first_record']:.2f}x "
        f"after the first evaluated record, {f['ratio_middle']:.2f}x from the 25 % to the 75 % record; "
        f"{f['agreement']} ({f['mix']})"
    )


def kernelbench_line(report: dict) -> str:
    f = report["figures"]
    ratio = f["engine_per_hour"] / f["kernelbench_per_hour"]
    return (
        f"**Against KernelBench's own flow, {report['title']}**: {ratio:.1f}x ({_count(f['engine_per_hour'])} "
        f"verified kernels/hour from the start over {f['engine_kernels']} kernels, KernelBench's flow "
        f"{_count(f['kernelbench_per_hour'])}/h over the first {f['kernelbench_kernels']} of them); verdicts "
        f"{f['verdicts_agree']} of {f['kernelbench_kernels']} the same ({f['mix']})"
    )


KINDS = {"reverify": reverify_line, "throughput": throughput_line, "scaling": scaling_line,
         "cold_scaling": cold_scaling_line, "kernelbench": kernelbench_line}  # fmt: skip


def report_line(name: str, report: dict) -> str:
    kind = report.get("kind")
    if kind not in KINDS:
        raise ValueError(f"{name}: unknown kind {kind!r} (known: {', '.join(KINDS)})")
    return (
        f"- {KINDS[kind](report)}. {report['gpu']}, commit `{report['commit']}`, {report['date']} "
        f"(`benchmarks/reports/{name}`)."
    )


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else path.name


def _builder(version: str | None) -> str:
    match = re.search(r"\+g([0-9a-f]{7})", version or "")
    return match.group(1) if match else str(version)


def sample_line(sample_dir: Path, schema_path: Path) -> str:
    files = sorted((sample_dir / "data").glob("*.parquet"))
    if not files:
        raise ValueError(f"{sample_dir}: no Parquet under data/")
    rows = pa.concat_tables([pq.read_table(f, columns=SAMPLE_COLUMNS) for f in files]).to_pylist()
    builders = Counter(_builder(r["builder_version"]) for r in rows).most_common()
    gpus = sorted({r["gpu_name"] or "CPU" for r in rows})
    built = " and ".join(f"{commit} ({count} record{'s' if count > 1 else ''})" for commit, count in builders)
    fields = set(json.loads(schema_path.read_text())["properties"])
    lacking = sorted(fields - set(pq.read_schema(files[0]).names))
    lacks = (
        "Record fields of the current schema it lacks: " + ", ".join(f"`{name}`" for name in lacking)
        if lacking
        else "It has every field of the current record schema"
    )
    correct = sum(r["status"] == "correct" for r in rows)
    tasks = len({r["task_id"] for r in rows})
    return (
        f"- **The sample** (`{_shown(sample_dir)}/`): {len(rows)} kernels over {tasks} tasks, {correct} correct, verified "
        f"on {', '.join(gpus)} by builder commit{'s' if len(builders) > 1 else ''} {built}. {lacks}."
    )


def render(reports_dir: Path, sample_dir: Path | None, schema_path: Path) -> str:
    """The block's lines, markers excluded: the sample first, then the reports by kind, then by file name."""
    lines = [sample_line(sample_dir, schema_path)] if sample_dir is not None else []
    reports = [(path.name, json.loads(path.read_text())) for path in sorted(reports_dir.glob("*.json"))]
    order = list(KINDS)
    reports.sort(key=lambda item: (order.index(item[1]["kind"]) if item[1].get("kind") in order else -1, item[0]))
    lines += [report_line(name, report) for name, report in reports]
    return "\n".join(lines)


def replace_block(text: str, block: str) -> str:
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"README has no {BEGIN} ... {END} block")
    return text[: start + len(BEGIN)] + "\n" + block + "\n" + text[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the README's block differs")
    parser.add_argument("--readme", type=Path, default=REPO / "README.md")
    parser.add_argument("--reports", type=Path, default=REPO / "benchmarks" / "reports")
    parser.add_argument("--sample", type=Path, default=REPO / "data" / "sample")
    parser.add_argument("--schema", type=Path, default=REPO / "schemas" / "kernel_record.json")
    args = parser.parse_args(argv)
    try:
        text = args.readme.read_text()
        new = replace_block(text, render(args.reports, args.sample, args.schema))
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyError as error:
        print(f"error: a report or the sample lacks {error}", file=sys.stderr)
        return 2
    if new == text:
        return 0
    if args.check:
        print(f"{args.readme}: its figures differ from the reports: run python benchmarks/readme_figures.py",
              file=sys.stderr)  # fmt: skip
        return 1
    args.readme.write_text(new)
    print(f"{args.readme}: figures rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
