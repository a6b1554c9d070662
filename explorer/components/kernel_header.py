"""The head of the kernel page: what the kernel is, its timings, and what those timings were measured on."""

from __future__ import annotations

from typing import Any

import streamlit as st

from explorer.kernel_facts import reference_facts

LANGUAGE_WORDS = {"cuda": "CUDA", "cpp": "C++", "python": "Python"}
BACKEND_WORDS = {"cuda": "GPU", "cpu": "CPU"}


def identity(record: dict[str, Any]) -> list[str]:
    """`CUDA kernel · verified on GPU · generator llm · model m · kernel 1a2b...`, each part archive text."""
    language = LANGUAGE_WORDS.get(record.get("language") or "", record.get("language") or "unknown language")
    backend = BACKEND_WORDS.get(record.get("backend") or "", record.get("backend") or "an unknown backend")
    parts = [f"{language} kernel verified on {backend}", f"generator {record.get('generator')}"]
    parts += [f"{name} {record[name]}" for name in ("model", "experiment") if record.get(name)]
    parts.append(f"kernel {record['kernel_id']}")
    return parts


def _number(value: Any, pattern: str) -> str:
    return pattern.format(value) if value is not None else "—"


def timing_metrics(record: dict[str, Any]) -> None:
    """Speedups first, then runtimes; the hardware floor and speed of light when the archive records them."""
    iqr = record.get("speedup_eager_iqr")
    items = [
        (
            "Speedup vs eager",
            _number(record.get("speedup_eager"), "{:.2f}×"),
            "eager median / kernel median" + (f"; spread (IQR of the per-block ratios) {iqr:.3f}" if iqr else ""),
        ),
        ("Speedup vs torch.compile", _number(record.get("speedup_compile"), "{:.2f}×"), None),
        ("Runtime (ms)", _number(record.get("runtime_ms"), "{:.4f}"), "median of the timed calls"),
        ("Eager (ms)", _number(record.get("eager_ms"), "{:.4f}"), None),
        ("torch.compile (ms)", _number(record.get("compile_ms"), "{:.4f}"), None),
    ]
    if record.get("floor_ms") is not None or record.get("speed_of_light") is not None:
        items += [
            (
                "Speed of light",
                _number(record.get("speed_of_light"), "{:.1%}"),
                "floor ÷ runtime: how close the kernel comes to the memory limit",
            ),
            ("Floor (ms)", _number(record.get("floor_ms"), "{:.4f}"), "least time the device's memory allows"),
        ]
    for column, (label, value, help_text) in zip(st.columns(len(items)), items, strict=True):
        column.metric(label, value, help=help_text)


def measurement_context(record: dict[str, Any]) -> list[str]:
    """What a speedup was measured on: device, dtype, input shapes, spread and runtime variation."""
    facts = reference_facts(record.get("reference_module_code"))
    parts = [f"measured on {record.get('gpu_name') or 'an unrecorded device'}"]
    if record.get("compute_capability"):
        parts[0] += f" (sm {record['compute_capability']})"
    parts.append(f"dtype {facts['dtype'] or 'not recorded'}")
    shapes = facts["shapes"]
    parts.append("inputs " + (", ".join(shapes) if shapes else "not recorded"))
    if record.get("speedup_eager_iqr") is not None:
        parts.append(f"speedup spread (IQR) {record['speedup_eager_iqr']:.3f}")
    if record.get("runtime_std_ms") is not None:
        calls = f", {record['runtime_n']} calls" if record.get("runtime_n") else ""
        parts.append(f"runtime ± {record['runtime_std_ms']:.4f} ms (std{calls})")
    return parts
