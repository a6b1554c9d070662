"""A benchmark's stall report: when one owner has held a device's gate longer than `stall_s`, print once what
the gate, the owner's scratch folder and the builder's processes look like (which words were written, which
processes are stopped), so a stalled run says where it stalled."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

from builder.verify.engine.device_gate import DeviceGate


class GateWatch(threading.Thread):
    def __init__(self, gate: DeviceGate, stall_s: float = 30.0, every_s: float = 2.0) -> None:
        super().__init__(daemon=True, name="ka-gate-watch")
        self.gate, self.stall_s, self.every_s = gate, stall_s, every_s
        self.stopping = threading.Event()
        self.reported: set[int] = set()
        self.draining_reported = False

    def run(self) -> None:
        while not self.stopping.wait(self.every_s):
            state = self.gate.describe()
            owner = state["owner"]
            if owner is not None and state["owned_s"] >= self.stall_s and id(owner) not in self.reported:
                self.reported.add(id(owner))
                what = f"{state['purpose']} owner has held the device {state['owned_s']:.0f} s"
            elif state["state"] == "draining" and state["state_s"] >= self.stall_s and not self.draining_reported:
                self.draining_reported = True  # once a run: owners waited that long for checks that did not end
                what = f"owners have waited {state['state_s']:.0f} s for checks in flight"
            else:
                continue
            print(f"  STALL: {what}: {state}", flush=True)
            for line in stall_lines(owner):
                print(f"  STALL: {line}", flush=True)

    def stop(self) -> None:
        self.stopping.set()


def stall_lines(owner: object) -> list[str]:
    lines = []
    scratch = getattr(owner, "scratch", None) or getattr(getattr(owner, "process", None), "scratch", None)
    if isinstance(scratch, Path) and scratch.is_dir():
        lines.append(f"owner's scratch {scratch}: {sorted(p.name for p in scratch.iterdir())}")
    try:
        table = subprocess.run(["ps", "-eo", "pid,ppid,pgid,stat,etimes,pcpu,wchan:24,args"], capture_output=True,
                               text=True, timeout=10).stdout.splitlines()  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        return [*lines, f"ps failed: {exc}"]
    wanted = ("ncu", "builder.verify", "bwrap", "clang-tidy")
    lines += [table[0], *(row[:220] for row in table[1:] if any(word in row for word in wanted))]
    return lines
