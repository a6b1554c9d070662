"""The dataset card (README.md): YAML `configs:` for `load_dataset`, then facts about the archive."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import yaml

from builder import config
from schemas import STATUSES, flag_vocabulary

SOFTWARE_FIELDS = ("torch_version", "cuda_version", "nvcc_version", "driver_version", "builder_version")
CONFIG_TEXT = {
    "default": "every verified kernel, correct and failed, with full metadata; one split per level",
    "sakana": "the 18 columns of the best-known public archive, same names and types (drop-in for code written for it)",
    "sft": "(prompt, completion) pairs: task reference + instruction -> a correct, ranking-eligible kernel",
    "preference": "(prompt, chosen, rejected) pairs within a task: faster correct vs slower correct or failed",
}


@dataclass
class CardFacts:
    license_id: str
    total: int
    by_level_status: Counter = field(default_factory=Counter)
    flags: Counter = field(default_factory=Counter)
    hardware: Counter = field(default_factory=Counter)  # (backend, gpu_name) -> n
    software: dict[str, Counter] = field(default_factory=dict)
    tolerances: Counter = field(default_factory=Counter)  # (atol, rtol) -> n
    trials: Counter = field(default_factory=Counter)
    seed_policies: Counter = field(default_factory=Counter)
    isolation: Counter = field(default_factory=Counter)
    work_queues: Counter = field(default_factory=Counter)  # device_connections of CUDA records whose child ran
    claims: Counter = field(default_factory=Counter)  # (claimed_correct, status) for imported records
    speeds_of_light: list[float] = field(default_factory=list)  # speed_of_light of the correct CUDA records
    floors: int = 0  # CUDA records with a runtime floor
    generators: Counter = field(default_factory=Counter)
    build_runs: int = 0
    records_kept: int = 0  # records an export merged in from the dataset's earlier builds


def collect_facts(records: pa.Table, builds: list[dict[str, Any]], license_id: str, kept: int = 0) -> CardFacts:
    col = {
        name: records.column(name).to_pylist()
        for name in (
            "level",
            "status",
            "backend",
            "gpu_name",
            "atol",
            "rtol",
            "trials",
            "seed_policy",
            "isolation",
            "device_connections",
            "eval_s",
            "generator",
            "claimed_correct",
            "floor_ms",
            "speed_of_light",
            *SOFTWARE_FIELDS,
        )
    }
    facts = CardFacts(license_id=license_id, total=records.num_rows, build_runs=len(builds), records_kept=kept)
    facts.by_level_status.update(zip(col["level"], col["status"], strict=True))
    for flags in records.column("flags").to_pylist():
        facts.flags.update(flags or [])
    facts.hardware.update(zip(col["backend"], (g or "unknown" for g in col["gpu_name"]), strict=True))
    facts.software = {name: Counter(v for v in col[name] if v) for name in SOFTWARE_FIELDS}
    facts.tolerances.update((a, r) for a, r in zip(col["atol"], col["rtol"], strict=True) if a is not None)
    facts.trials.update(t for t in col["trials"] if t is not None)
    facts.seed_policies.update(p for p in col["seed_policy"] if p)
    facts.isolation.update(i for i in col["isolation"] if i)
    ran = zip(col["backend"], col["eval_s"], col["device_connections"], strict=True)
    facts.work_queues.update(q or "the driver's (8)" for b, e, q in ran if b == "cuda" and e is not None)
    facts.generators.update(col["generator"])
    facts.floors = sum(1 for b, f in zip(col["backend"], col["floor_ms"], strict=True) if b == "cuda" and f is not None)
    facts.speeds_of_light = sorted(v for v, s in zip(col["speed_of_light"], col["status"], strict=True)
                                   if v is not None and s == "correct")  # fmt: skip
    for generator, claimed, status in zip(col["generator"], col["claimed_correct"], col["status"], strict=True):
        if generator == "import" and claimed is not None:
            facts.claims[(bool(claimed), status)] += 1
    return facts


def _kept_clause(kept: int) -> str:
    if not kept:
        return ""
    return f", plus {kept} record(s) kept from earlier builds of this dataset (each names its builder version)"


def _front_matter(facts: CardFacts, configs: dict[str, dict[str, dict[str, Any]]]) -> str:
    entries = []
    for name, splits in configs.items():
        folder_files = [
            {"split": split, "path": f"{info['files'][0].split('/')[0]}/{split}-*.parquet"}
            for split, info in splits.items()
        ]
        entry: dict[str, Any] = {"config_name": name, "data_files": folder_files}
        if name == "default":
            entry["default"] = True
        entries.append(entry)
    meta = {
        "license": facts.license_id,
        "pretty_name": "Verified kernel archive",
        "tags": ["cuda", "gpu-kernels", "code", "pytorch", "verified"],
        "task_categories": ["text-generation"],
        "size_categories": [_size_category(facts.total)],
        "configs": entries,
    }
    return "---\n" + yaml.safe_dump(meta, sort_keys=False) + "---\n"


def _size_category(n: int) -> str:
    for limit, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < limit:
            return label
    return "1M<n<10M"


def _table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _counter_line(counter: Counter) -> str:
    return ", ".join(f"{k} ({n})" for k, n in counter.most_common()) or "not recorded"


def _floor_line(facts: CardFacts) -> str:
    line = (f"- Runtime floor (`floor_ms`, {facts.floors} CUDA records): the outputs and the inputs they depend on moved "
            "at the GPU's peak DRAM bandwidth (2 x memory clock x bus width, from NVML); a runtime under "
            f"{config.IMPLAUSIBLE_RUNTIME_FRACTION:g} of it is `implausible_runtime`. `speed_of_light` = floor_ms / "
            "runtime_ms ranks kernels by how close they come to the memory limit")  # fmt: skip
    speeds = facts.speeds_of_light
    if speeds:
        line += f" (correct kernels: median {statistics.median(speeds):.2f}, highest {speeds[-1]:.2f})"
    return line + ". CPU records have no floor."


def render_card(facts: CardFacts, configs: dict[str, dict[str, dict[str, Any]]]) -> str:
    levels = sorted({level for level, _ in facts.by_level_status})
    status_rows = [
        [
            f"level_{level}",
            *(facts.by_level_status.get((level, s), 0) for s in STATUSES),
            sum(facts.by_level_status.get((level, s), 0) for s in STATUSES),
        ]
        for level in levels
    ]
    config_rows = [
        [f"`{name}`", CONFIG_TEXT[name], ", ".join(f"{split} ({info['rows']})" for split, info in splits.items())]
        for name, splits in configs.items()
    ]
    missing = [name for name in CONFIG_TEXT if name not in configs]
    vocabulary = flag_vocabulary()
    check_rows = [
        [f"`{name}`", "yes" if spec["disqualifying"] else "no", spec["text"], facts.flags.get(name, 0)]
        for name, spec in vocabulary.items()
    ]
    parts = [
        _front_matter(facts, configs),
        "# Verified kernel archive\n",
        f"{facts.total} GPU/CPU kernels for PyTorch tasks, each compiled and verified in a sandbox against the "
        "PyTorch reference, correct **and** failed, with error text, timings, profiles and provenance. "
        f"Built by verified-kernel-archive over {facts.build_runs} build run(s){_kept_clause(facts.records_kept)}; "
        f"generators: {_counter_line(facts.generators)}.\n",
        "## Configs and how to load them\n",
        _table(["config", "contents", "splits (rows)"], config_rows),
        "",
        '```python\nfrom datasets import load_dataset\n\nrepo = "ORG/NAME"  # or a local export directory',
        "\n".join(
            f"{name} = load_dataset(repo{'' if name == 'default' else f', {json.dumps(name)}'})  # {', '.join(splits)}"
            for name, splits in configs.items()
        ),
        "```\n",
    ]
    if missing:
        parts.append(f"Not in this export (no qualifying rows): {', '.join(missing)}.\n")
    parts += [
        "## Counts per split and status\n",
        _table(["split", *STATUSES, "total"], status_rows),
        "",
        "`ranking_eligible` is true only for `correct` kernels that raised no flag.\n",
        "## Verification policy\n",
        f"- Seeds: {_counter_line(facts.seed_policies)}; the seeds of every record are stored with it (`seeds`). "
        "Models and inputs are drawn on the record's backend device (a CUDA record's from the CUDA generator).",
        f"- Correctness trials per kernel: {_counter_line(facts.trials)}, fresh inputs per trial.",
        f"- Tolerances (atol, rtol): {_counter_line(facts.tolerances)}; per-task overrides are recorded per row.",
        f"- Sandbox isolation: {_counter_line(facts.isolation)}.",
        *(
            [
                f"- Hardware work queues of the CUDA context each kernel ran in (`device_connections`): "
                f"{_counter_line(facts.work_queues)}. Work on one stream runs in order on one queue whatever the count; "
                "a kernel whose work may span streams gets the driver's."
            ]
            if facts.work_queues
            else []
        ),
        "- Outputs are checked against the reference with poisoned (NaN-filled) memory so a kernel that returns an "
        "uninitialised buffer still holding the reference result fails; near-constant references are flagged so "
        "near-zero outputs cannot pass unnoticed.",
        "- The reference is computed in a clean process that never loads candidate code, and the comparison is made "
        "by the builder, not in the candidate's process: a kernel that changes what the reference computes when it "
        "loads cannot pass, and is flagged `tampers_reference`. It runs at its dtype's full precision (no TF32, no "
        "reduced-precision fp16/bf16 reductions); eager is timed with PyTorch's defaults.",
        *([_floor_line(facts)] if facts.floors else []),
        "- Speedups over eager come from PyTorch eager timed beside the kernel in one window, its calls alternating "
        "with the kernel's (`speedup_eager_iqr` is the spread of per-block ratios); `eager_clean_ms` is eager in a clean process.",
        "",
        "Checks (flags) and how often they fired:\n",
        _table(["flag", "disqualifying", "meaning", "records"], check_rows),
        "",
        "## Hardware and software\n",
        _table(["backend", "device", "records"], [[b, d, n] for (b, d), n in facts.hardware.most_common()]),
        "",
        *(f"- {name}: {_counter_line(counter)}" for name, counter in facts.software.items()),
        "",
    ]
    if facts.claims:
        held = sum(n for (claimed, status), n in facts.claims.items() if claimed == (status == "correct"))
        total = sum(facts.claims.values())
        rows = [
            [claimed, status, n]
            for (claimed, status), n in sorted(facts.claims.items(), key=lambda kv: (not kv[0][0], kv[0][1]))
        ]
        parts += [
            "## Imported claims\n",
            f"{held} of {total} imported kernels' claims held under our verification (claimed_correct vs status):\n",
            _table(["claimed_correct", "status", "records"], rows),
            "",
        ]
    parts += [
        "## License\n",
        f"`{facts.license_id}` (data). Each row keeps its provenance (`generator`, `model`, `source_ref`).\n",
        f"Schema: `schemas/kernel_record.json` of verified-kernel-archive; Parquet row groups of {config.PARQUET_ROW_GROUP_SIZE} rows.\n",
    ]
    return "\n".join(parts)
