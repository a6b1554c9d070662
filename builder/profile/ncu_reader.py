"""Read an .ncu-rep with Nsight Compute's own `ncu_report` module; print the entries as JSON.

Usage: python -m builder.profile.ncu_reader REPORT.ncu-rep MODULE_DIR
Run as a subprocess by ncu.parse_report: the module is native code shipped with Nsight Compute, so a
crash or a hang here costs one subprocess, never the builder. Raw metric names are used (stable
across versions, unlike the details page's display names).
"""

from __future__ import annotations

import ast
import json
import sys

from builder.profile.ncu_csv import convert, finish_entry

# entry key -> raw metric names, first present wins
RAW_METRICS = {
    "duration_ms": ("gpu__time_duration.sum",),
    "sm_pct": ("sm__throughput.avg.pct_of_peak_sustained_elapsed",),
    "dram_pct": (
        "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
        "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    ),
    "memory_pct": ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",),
    "occupancy_pct": ("sm__warps_active.avg.pct_of_peak_sustained_active",),
    "theoretical_occupancy_pct": ("sm__maximum_warps_per_active_cycle_pct",),
    "registers": ("launch__registers_per_thread",),
    "shared_static_bytes": ("launch__shared_mem_per_block_static",),
    "shared_dynamic_bytes": ("launch__shared_mem_per_block_dynamic",),
    "waves_per_sm": ("launch__waves_per_multiprocessor",),
}
PERCENT_UNITS = ("%", "pct", "")


def _metric(action, names: tuple[str, ...]):
    for name in names:
        metric = action.metric_by_name(name)
        if metric is not None:
            return metric
    return None


def _value(metric) -> float | None:
    try:
        value = metric.value()
    except Exception:  # noqa: BLE001 - SWIG raises its own types for unavailable values
        return None
    return float(value) if isinstance(value, (int, float)) else None


def _unit(metric) -> str:
    try:
        return str(metric.unit() or "")
    except Exception:  # noqa: BLE001
        return ""


def _dims(action, prefix: str) -> list[int] | None:
    values = []
    for axis in "xyz":
        metric = action.metric_by_name(f"{prefix}_{axis}")
        value = _value(metric) if metric is not None else None
        if value is None:
            return None
        values.append(int(value))
    return values


def _literal(value):
    """Some versions return rule payloads as the text of a Python dict."""
    if isinstance(value, str):
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return value
    return value


def _rules(action) -> list[dict]:
    try:
        raw = list(action.rule_results_as_dicts())
    except Exception:  # noqa: BLE001 - older readers lack the method
        return []
    rules = []
    for item in raw:
        item = _literal(item)
        if not isinstance(item, dict):
            continue
        message = _literal(item.get("rule_message")) or {}
        speedup = _literal(item.get("speedup_estimation")) or {}
        if not isinstance(message, dict):
            message = {"message": str(message)}
        text = " ".join(str(message.get("message") or "").split())
        if not text:
            continue  # a rule that ran and found nothing to say
        rules.append(
            {
                "name": str(item.get("rule_identifier") or item.get("name") or ""),
                "type": str(message.get("type")) if message.get("type") is not None else None,
                "title": message.get("title"),
                "text": text,
                "section": item.get("section_identifier"),
                "speedup_pct": speedup.get("speedup") if isinstance(speedup, dict) else None,
                "speedup_type": str(speedup.get("type")) if isinstance(speedup, dict) and speedup.get("type") else None,
            }
        )
    return rules


def read(report_path: str, module_dir: str) -> dict:
    sys.path.insert(0, module_dir)
    import ncu_report  # noqa: PLC0415 - only importable once module_dir is on the path

    context = ncu_report.load_report(report_path)
    kernels = []
    launch = 0
    for range_index in range(context.num_ranges()):
        report_range = context.range_by_idx(range_index)
        for action_index in range(report_range.num_actions()):
            action = report_range.action_by_idx(action_index)
            try:
                name = action.name(ncu_report.IAction.NameBase_DEMANGLED)
            except Exception:  # noqa: BLE001
                name = action.name()
            entry = {
                "id": launch,
                "name": name,
                "grid": _dims(action, "launch__grid_dim"),
                "block": _dims(action, "launch__block_dim"),
                "rules": _rules(action),
            }
            for key, names in RAW_METRICS.items():
                metric = _metric(action, names)
                if metric is None:
                    entry[key] = None
                    continue
                unit = _unit(metric)
                if key.endswith("_pct") and unit in PERCENT_UNITS:
                    unit = "%"
                value = _value(metric)
                entry[key] = convert(key, value, unit)
                if key == "duration_ms" and entry[key] is None and value is not None:
                    entry[key] = value * 1e-6  # gpu__time_duration is counted in nanoseconds
            kernels.append(finish_entry(entry))
            launch += 1
    version = None
    try:
        version = str(context.get_version()) if hasattr(context, "get_version") else None
    except Exception:  # noqa: BLE001
        pass
    return {"source": "ncu_report", "report_version": version, "kernels": kernels}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m builder.profile.ncu_reader REPORT MODULE_DIR", file=sys.stderr)
        return 2
    print(json.dumps(read(argv[0], argv[1])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
