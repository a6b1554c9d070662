"""Render the prompt templates of data/prompts/ and the feedback a parent's record gives its child.

Templates are files, not code (data/prompts/README.md lists their fields). Feedback reads the fields
the verifier and profilers fill in a KernelRecord: verdict, compiler/runtime error, correctness
differences, flags, runtime against eager and torch.compile, Nsight Compute summary, clang-tidy.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from builder import config
from builder.errors import UsageError
from schemas import flag_vocabulary

FIELD = re.compile(r"\{\{\s*(\w+)\s*\}\}")
LANGUAGE_NAMES = {"cuda": "CUDA", "cpp": "C++ (CPU)"}
FENCES = {"cuda": "cuda", "cpp": "cpp"}


def template(name: str, prompts_dir: Path | None = None) -> str:
    path = Path(prompts_dir or config.PROMPTS_DIR) / f"{name}.md"
    try:
        return path.read_text()
    except OSError:
        raise UsageError(f"prompt template missing: {path}") from None


def render(name: str, values: dict[str, Any], prompts_dir: Path | None = None) -> str:
    """Fill `{{field}}`s in one pass; a field without a value is an error naming the template."""
    text = template(name, prompts_dir)
    missing = sorted({m.group(1) for m in FIELD.finditer(text)} - set(values))
    if missing:
        raise UsageError(f"prompt template {name}.md uses field(s) the loop does not provide: {', '.join(missing)}")
    return FIELD.sub(lambda m: str(values[m.group(1)]), text)


def _cut(text: str, limit: int = config.LLM_FEEDBACK_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + f"\n... ({len(text) - limit} more characters cut)"


def _get(record: Any, name: str) -> Any:
    return record.get(name) if isinstance(record, dict) else getattr(record, name, None)


def _json_field(record: Any, name: str) -> Any:
    raw = _get(record, name)
    if not raw:
        return None
    try:
        return json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return None


def _fmt(value: float | None, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:.4g}{unit}"


def verdict_line(record: Any) -> str:
    status = _get(record, "status")
    flags = _get(record, "flags") or []
    return status + (f" (flags: {', '.join(flags)})" if flags else "")


def summary_line(record: Any) -> str:
    """A short description of a verified kernel: verdict, runtime, speedups."""
    parts = [verdict_line(record)]
    if _get(record, "runtime_ms") is not None:
        parts.append(f"{_fmt(_get(record, 'runtime_ms'), ' ms')}")
    if _get(record, "speedup_eager") is not None:
        parts.append(f"{_fmt(_get(record, 'speedup_eager'), 'x')} vs eager")
    if _get(record, "speedup_compile") is not None:
        parts.append(f"{_fmt(_get(record, 'speedup_compile'), 'x')} vs torch.compile")
    return ", ".join(parts)


def feedback(record: Any) -> str:
    """Everything the verifier learned about a parent, as Markdown for the next prompt."""
    lines: list[str] = []
    status = _get(record, "status")
    error = _get(record, "error")
    if status == "compile_error":
        lines += ["Compiler output:", "```", _cut(error or "(no message)"), "```"]
    elif error:
        lines += [
            f"{'Runtime error' if status in ('runtime_error', 'crash', 'timeout') else 'Verifier message'}:",
            "```",
            _cut(error),
            "```",
        ]
    if _get(record, "max_diff") is not None:
        lines.append(
            f"Correctness: max |diff| {_fmt(_get(record, 'max_diff'))}, mean |diff| {_fmt(_get(record, 'mean_diff'))} "
            f"(tolerance atol {_fmt(_get(record, 'atol'))}, rtol {_fmt(_get(record, 'rtol'))}) over "
            f"{_get(record, 'trials') or 0} trials."
        )
    vocabulary = flag_vocabulary()
    for flag in _get(record, "flags") or []:
        lines.append(f"Flag `{flag}`: {vocabulary.get(flag, {}).get('text', '')}")
    if _get(record, "runtime_ms") is not None:
        lines.append(
            f"Runtime: {_fmt(_get(record, 'runtime_ms'), ' ms')} (median); PyTorch eager {_fmt(_get(record, 'eager_ms'), ' ms')}"
            f" -> {_fmt(_get(record, 'speedup_eager'), 'x')}; torch.compile {_fmt(_get(record, 'compile_ms'), ' ms')}"
            f" -> {_fmt(_get(record, 'speedup_compile'), 'x')}."
        )
    if _get(record, "torch_own_fraction") is not None:
        lines.append(f"Share of device time in your own kernels: {_get(record, 'torch_own_fraction'):.0%}.")
    ncu_numbers = [
        ("SM throughput", _get(record, "ncu_sm_pct"), "%"),
        ("DRAM throughput", _get(record, "ncu_dram_pct"), "%"),
        ("achieved occupancy", _get(record, "ncu_occupancy_pct"), "%"),
        ("registers/thread", _get(record, "ncu_registers"), ""),
    ]
    shown = [f"{label} {_fmt(value, unit)}" for label, value, unit in ncu_numbers if value is not None]
    if shown:
        lines.append("Nsight Compute: " + ", ".join(shown) + ".")
    ncu = _json_field(record, "ncu_profile")
    rules = ncu.get("rules") if isinstance(ncu, dict) else None
    if isinstance(rules, list):
        for rule in rules[:5]:
            text = rule.get("message") or rule.get("description") if isinstance(rule, dict) else str(rule)
            if text:
                lines.append(f"- NCU: {_cut(str(text), 300)}")
    tidy = _json_field(record, "clang_tidy")
    diagnostics = tidy.get("diagnostics") if isinstance(tidy, dict) else None
    if isinstance(diagnostics, list) and diagnostics:
        lines.append("clang-tidy:")
        for diag in diagnostics[: config.LLM_CLANG_TIDY_FINDINGS]:
            if isinstance(diag, dict):
                lines.append(
                    f"- line {diag.get('line')}: {diag.get('severity', 'warning')}: {diag.get('message')} [{diag.get('check')}]"
                )
    return "\n".join(lines) if lines else "The verifier reported nothing beyond the verdict."


def goal(record: Any) -> str:
    status = _get(record, "status")
    if status == "correct" and not (_get(record, "flags") or []):
        return "It is correct. Make it faster while keeping it correct."
    if status == "correct":
        return "It passed, but with the flags above. Remove their cause and make it faster."
    if status == "compile_error":
        return "Fix the compile errors (keep the approach if it is sound)."
    if status == "incorrect":
        return "Its output is wrong. Find and fix the bug; correctness first, speed second."
    return "It failed at run time. Find the cause (out-of-bounds access, wrong shapes, launch errors) and fix it."
