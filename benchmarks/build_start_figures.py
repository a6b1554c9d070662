"""Figures of `benchmarks/device/build_start.sh`: from each order's progress samples (a line per sample: the time,
the run's start, progress.json), when the build stored its first record, how many it had stored by the stop, when
it first held one (made before the control kernel was judged), and the control's own figures in the build.

    python benchmarks/build_start_figures.py OUT/progress-stream.log OUT/progress-preflight.log
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def figures(path: Path) -> dict:
    first = last = first_held = None
    stored, control = 0, {}
    for line in path.read_text().splitlines():
        when, began, text = line.split(" ", 2)
        try:
            snapshot = json.loads(text)
            stored = snapshot["stored"]
        except (ValueError, KeyError):
            continue  # a sample taken while the file was replaced
        control = snapshot.get("control") or control
        seconds = float(when) - float(began)
        if stored and first is None:
            first = seconds
        if snapshot.get("held") and first_held is None:
            first_held = seconds
        last = seconds
    return {"first_stored_s": None if first is None else round(first, 1), "stored": stored,
            "by_s": None if last is None else round(last, 1),
            "first_held_s": None if first_held is None else round(first_held, 1),
            "control_in_build": control}  # fmt: skip


def main(paths: list[str]) -> int:
    if not paths:
        print("usage: build_start_figures.py PROGRESS_LOG...", file=sys.stderr)
        return 2
    for name in paths:
        path = Path(name)
        if not path.is_file():
            print(f"error: {name}: no such file", file=sys.stderr)
            return 2
        order = path.stem.removeprefix("progress-")
        print(order, json.dumps(figures(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
