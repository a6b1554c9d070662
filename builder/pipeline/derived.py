"""Derived dataset configs built from the exported records: `sakana`, `sft` and `preference`.

All take the default config's Arrow table (schema `schemas.arrow.kernel_record_schema()`) and return
Arrow tables; export.py writes them.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from builder import config
from builder.errors import UsageError
from schemas import sakana_mapping
from schemas.arrow import arrow_type, sakana_schema

SFT_LANGUAGES = {"cuda": "CUDA", "cpp": "C++ (CPU)"}  # extension kernels; ModelNew .py files use another contract
_FIELD = re.compile(r"\{\{(\w+)\}\}")

SFT_SCHEMA = pa.schema(
    [
        ("prompt", pa.string()),
        ("completion", pa.string()),
        ("task_id", pa.string()),
        ("kernel_id", pa.string()),
        ("level", pa.int32()),
        ("language", pa.string()),
        ("backend", pa.string()),
        ("speedup_eager", pa.float64()),
    ]
)
PREFERENCE_SCHEMA = pa.schema(
    [
        ("prompt", pa.string()),
        ("chosen", pa.string()),
        ("rejected", pa.string()),
        ("task_id", pa.string()),
        ("level", pa.int32()),
        ("chosen_kernel_id", pa.string()),
        ("rejected_kernel_id", pa.string()),
        ("chosen_runtime_ms", pa.float64()),
        ("rejected_runtime_ms", pa.float64()),
        ("rejected_status", pa.string()),
        ("reason", pa.string()),  # "faster" (both correct) or "correct_vs_failed"
    ]
)


# That archive's functional column holds the whole runnable program (imports, module_fn, a Model whose
# forward(..., fn=module_fn) calls it, get_inputs, get_init_inputs), which is what its importers run.
FUNCTIONAL_PROGRAM_COLUMN = "PyTorch_Code_Functional"


def functional_program(records: pa.Table) -> pa.Array:
    """The whole functional program per record, or null for a task without a functional form.

    `reference_functional_code` holds only the `module_fn` definition; the program it belongs to is the
    task file the kernel was verified against (`reference_module_code`), which defines module_fn itself."""
    has_functional = pc.is_valid(records.column("reference_functional_code"))
    program = records.column("reference_module_code")
    return pc.if_else(has_functional, program, pa.scalar(None, program.type))


def sakana_table(records: pa.Table) -> pa.Table:
    """Exactly the 18 columns, names and types of the best-known public archive."""
    columns = []
    for column, (source, typ) in sakana_mapping().items():
        values = functional_program(records) if column == FUNCTIONAL_PROGRAM_COLUMN else records.column(source)
        if source == "status" and typ == "bool":
            values = pc.equal(values, "correct")
        columns.append(values.cast(arrow_type(typ)))
    return pa.Table.from_arrays(columns, schema=sakana_schema())


def load_instruction(path: Path | None = None) -> str:
    path = path or config.PROMPTS_DIR / config.SFT_INSTRUCTION_TEMPLATE
    try:
        return path.read_text()
    except OSError as exc:
        raise UsageError(f"{path}: SFT instruction template unreadable ({exc})") from None


def render(template: str, values: dict[str, str]) -> str:
    """One pass of {{field}} substitution: substituted text (kernel code with braces) is never re-read."""

    def substitute(match: re.Match) -> str:
        if match.group(1) not in values:
            raise UsageError(f"SFT instruction template names unknown field {{{{{match.group(1)}}}}}")
        return values[match.group(1)]

    return _FIELD.sub(substitute, template)


class _Prompts:
    """Prompt per (task, language), rendered once: every kernel of a task shares it."""

    def __init__(self, records: pa.Table, template: str):
        self.template = template
        self.cache: dict[tuple[str, str], str] = {}
        self.names = records.column("op_name").to_pylist()
        self.levels = records.column("level").to_pylist()
        module = records.column("reference_module_code").to_pylist()
        functional = records.column("reference_functional_code").to_pylist()
        self.reference = [m or f or "" for m, f in zip(module, functional, strict=True)]

    def get(self, row: int, task_id: str, language: str) -> str:
        key = (task_id, language)
        if key not in self.cache:
            self.cache[key] = render(
                self.template,
                {
                    "task_name": self.names[row],
                    "level": str(self.levels[row]),
                    "reference_code": self.reference[row],
                    "language_name": SFT_LANGUAGES.get(language, language),
                },
            )
        return self.cache[key]


def sft_table(records: pa.Table, template: str) -> pa.Table:
    """(prompt, completion) from correct, ranking-eligible extension kernels."""
    eligible = pc.and_(
        pc.fill_null(records.column("ranking_eligible"), False),
        pc.is_in(records.column("language"), pa.array(list(SFT_LANGUAGES))),
    )
    rows = pc.indices_nonzero(eligible).to_pylist()
    prompts = _Prompts(records, template)
    picked = records.take(pa.array(rows, pa.int64())) if rows else records.slice(0, 0)
    task_ids = picked.column("task_id").to_pylist()
    languages = picked.column("language").to_pylist()
    prompt_values = [prompts.get(row, t, lang) for row, t, lang in zip(rows, task_ids, languages, strict=True)]
    return pa.Table.from_arrays(
        [
            pa.array(prompt_values, pa.string()),
            picked.column("cuda_code"),
            picked.column("task_id"),
            picked.column("kernel_id"),
            picked.column("level").cast(pa.int32()),
            picked.column("language"),
            picked.column("backend"),
            picked.column("speedup_eager").cast(pa.float64()),
        ],
        schema=SFT_SCHEMA,
    )


def preference_table(records: pa.Table, template: str) -> pa.Table:
    """(prompt, chosen, rejected) within a task and language: faster correct vs slower correct or failed.

    "Faster" needs config.PREFERENCE_MIN_SPEEDUP (timing noise is not a preference); each task gives at
    most config.PREFERENCE_PAIRS_PER_TASK pairs, the clearest (largest runtime ratio, then failures) first.
    """
    task_ids = records.column("task_id").to_pylist()
    languages = records.column("language").to_pylist()
    eligible = pc.fill_null(records.column("ranking_eligible"), False).to_pylist()
    statuses = records.column("status").to_pylist()
    runtimes = records.column("runtime_ms").to_pylist()
    groups: dict[tuple[str, str], tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
    for row, (task, lang) in enumerate(zip(task_ids, languages, strict=True)):
        if lang not in SFT_LANGUAGES:
            continue
        good, failed = groups[(task, lang)]
        if eligible[row] and runtimes[row]:
            good.append(row)
        elif statuses[row] != "correct":
            failed.append(row)  # correct-but-flagged kernels are neither chosen nor rejected
    pairs: list[tuple[int, int, str]] = []
    cap = config.PREFERENCE_PAIRS_PER_TASK
    for good, failed in groups.values():
        good.sort(key=lambda r: runtimes[r])
        # The `cap` largest ratios pair one of the `cap` fastest with one of the `cap` slowest kernels,
        # so only those are compared (linear, not quadratic, in kernels per task).
        slowest = set(good[-cap:])
        faster = [
            (runtimes[slow] / runtimes[fast], fast, slow)
            for i, fast in enumerate(good[:cap])
            for slow in good[i + 1 :]
            if slow in slowest and runtimes[slow] >= runtimes[fast] * config.PREFERENCE_MIN_SPEEDUP
        ]
        faster.sort(key=lambda item: -item[0])
        by_speed = [(f, s, "faster") for _, f, s in faster]
        versus_failed = [(good[0], bad, "correct_vs_failed") for bad in failed] if good else []
        # Half the budget for each kind, the rest to whichever kind has more.
        half = cap // 2
        chosen = by_speed[:half] + versus_failed[:half]
        chosen += (by_speed[half:] + versus_failed[half:])[: cap - len(chosen)]
        pairs.extend(chosen)
    prompts = _Prompts(records, template)
    code = records.column("cuda_code")
    chosen_rows = pa.array([p[0] for p in pairs], pa.int64())
    rejected_rows = pa.array([p[1] for p in pairs], pa.int64())
    kernel_ids = records.column("kernel_id")
    return pa.Table.from_arrays(
        [
            pa.array([prompts.get(c, task_ids[c], languages[c]) for c, _, _ in pairs], pa.string()),
            code.take(chosen_rows),
            code.take(rejected_rows),
            pa.array([task_ids[c] for c, _, _ in pairs], pa.string()),
            records.column("level").take(chosen_rows).cast(pa.int32()),
            kernel_ids.take(chosen_rows),
            kernel_ids.take(rejected_rows),
            pa.array([runtimes[c] for c, _, _ in pairs], pa.float64()),
            pa.array([runtimes[r] for _, r, _ in pairs], pa.float64()),
            pa.array([statuses[r] for _, r, _ in pairs], pa.string()),
            pa.array([reason for _, _, reason in pairs], pa.string()),
        ],
        schema=PREFERENCE_SCHEMA,
    )
