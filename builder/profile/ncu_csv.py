"""Parse Nsight Compute's details page exported as CSV, and the unit helpers both readers share.

`ncu --import REPORT --csv --page details` prints one row per (kernel launch, metric) and one per
rule finding, with the columns
    "ID","Process ID","Process Name","Host Name",[NVTX columns when --nvtx was used,]"Kernel Name",
    "Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name",
    "Metric Unit","Metric Value"[,"Rule Name","Rule Type","Rule Description",
    "Estimated Speedup Type","Estimated Speedup"]
Values may carry thousands separators ("1,410,000,000.50"); units depend on `--print-units`
("ns"/"nsecond", "us"/"usecond", "Kbyte/block", ...). Lines before the header (==PROF== chatter) are
skipped. Rows are addressed by column name, so extra or reordered columns do not matter.
"""

from __future__ import annotations

import csv
import io
import re

TIME_TO_MS = {
    "ns": 1e-6, "nsecond": 1e-6, "nsec": 1e-6,
    "us": 1e-3, "usecond": 1e-3, "usec": 1e-3,
    "ms": 1.0, "msecond": 1.0, "msec": 1.0,
    "s": 1e3, "second": 1e3,
}  # fmt: skip
BYTE_PREFIX = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "ki": 1024, "mi": 1024**2, "gi": 1024**3}

# Details-page metric names (as Nsight Compute 2023-2025 print them) -> kernel entry keys.
DETAIL_METRICS = {
    "Duration": "duration_ms",
    "Compute (SM) Throughput": "sm_pct",
    "SM Throughput": "sm_pct",
    "DRAM Throughput": "dram_pct",
    "Memory Throughput": "memory_pct",
    "Achieved Occupancy": "occupancy_pct",
    "Theoretical Occupancy": "theoretical_occupancy_pct",
    "Registers Per Thread": "registers",
    "Static Shared Memory Per Block": "shared_static_bytes",
    "Dynamic Shared Memory Per Block": "shared_dynamic_bytes",
    "Waves Per SM": "waves_per_sm",
}
PERCENT_KEYS = {"sm_pct", "dram_pct", "memory_pct", "occupancy_pct", "theoretical_occupancy_pct"}
BYTE_KEYS = {"shared_static_bytes", "shared_dynamic_bytes"}


def number(text: str | float | int | None) -> float | None:
    """A float from ncu's text ("1,234.5", "n/a" -> None)."""
    if isinstance(text, (int, float)):
        return float(text)
    if not text:
        return None
    cleaned = str(text).strip().replace(",", "")
    try:
        return float(cleaned)
    except ValueError:
        return None


def to_milliseconds(value: float | None, unit: str) -> float | None:
    if value is None:
        return None
    factor = TIME_TO_MS.get((unit or "").strip().lower())
    return None if factor is None else value * factor


def to_bytes(value: float | None, unit: str) -> float | None:
    """Bytes from a value in "byte", "Kbyte/block", "KiB", ... (per-block suffixes ignored)."""
    if value is None:
        return None
    base = (unit or "byte").split("/")[0].strip().lower()
    match = re.fullmatch(r"(ki|mi|gi|k|m|g|)(?:byte|b)s?", base)
    if not match:
        return None
    return value * BYTE_PREFIX[match.group(1)]


def dims(text: str | None) -> list[int] | None:
    """[x, y, z] from "(128, 1, 1)"."""
    found = re.findall(r"\d+", text or "")
    return [int(v) for v in found[:3]] if len(found) >= 3 else None


def convert(key: str, value: float | None, unit: str) -> float | int | None:
    """Normalise one metric into its entry key's unit (ms, %, bytes, count)."""
    if value is None:
        return None
    if key == "duration_ms":
        return to_milliseconds(value, unit)
    if key in BYTE_KEYS:
        converted = to_bytes(value, unit)
        return None if converted is None else int(round(converted))
    if key == "registers":
        return int(round(value))
    if key in PERCENT_KEYS and unit.strip() not in ("%", ""):
        return None  # a ratio in another unit would be misread as a percentage
    return value


def finish_entry(entry: dict) -> dict:
    """Derived fields every reader fills the same way."""
    static, dynamic = entry.get("shared_static_bytes"), entry.get("shared_dynamic_bytes")
    entry["shared_mem_bytes"] = None if static is None and dynamic is None else int((static or 0) + (dynamic or 0))
    return entry


def _header_offset(text: str) -> int:
    for match in re.finditer(r"^\"ID\",", text, flags=re.MULTILINE):
        return match.start()
    return -1


def parse_details_csv(text: str) -> dict:
    """{"source": "csv", "kernels": [entry, ...]} in launch order, or {"error": reason}."""
    start = _header_offset(text)
    if start < 0:
        return {"error": "ncu CSV has no header row (no kernel was profiled?)"}
    reader = csv.DictReader(io.StringIO(text[start:]))
    required = {"ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value"}
    missing = required - set(reader.fieldnames or [])
    if missing:
        return {"error": f"ncu CSV lacks column(s) {sorted(missing)}"}
    entries: dict[str, dict] = {}
    for row in reader:
        launch_id = row.get("ID")
        if launch_id is None or launch_id == "":
            continue
        entry = entries.get(launch_id)
        if entry is None:
            entry = entries[launch_id] = {
                "id": int(number(launch_id) or 0),
                "name": row.get("Kernel Name") or "",
                "grid": dims(row.get("Grid Size")),
                "block": dims(row.get("Block Size")),
                "device": row.get("Device"),
                "cc": row.get("CC"),
                "rules": [],
            }
        rule_name = (row.get("Rule Name") or "").strip()
        if rule_name:
            rule = {
                "name": rule_name,
                "type": (row.get("Rule Type") or "").strip() or None,
                "text": " ".join((row.get("Rule Description") or "").split()),
                "section": row.get("Section Name") or None,
                "speedup_pct": number(row.get("Estimated Speedup")),
                "speedup_type": (row.get("Estimated Speedup Type") or "").strip() or None,
            }
            if rule not in entry["rules"]:
                entry["rules"].append(rule)
        key = DETAIL_METRICS.get((row.get("Metric Name") or "").strip())
        if key is None or entry.get(key) is not None:
            continue
        entry[key] = convert(key, number(row.get("Metric Value")), row.get("Metric Unit") or "")
    kernels = [finish_entry(e) for e in sorted(entries.values(), key=lambda e: e["id"])]
    return {"source": "csv", "kernels": kernels}
