"""Where the cores went: busy core-seconds by kind of process, sampled from /proc (Linux).

The throughput bench runs every kind of work at once (shared builds, baseline and reference children,
evaluation children, the parent's judging), so a wall-clock phase says little about what held the cores.
A sampler thread reads every process's CPU time twice a second and charges its growth to the first
ancestor (itself included) whose command line or working directory names a kind of work: the builder's
scratch folders are named after it (`ka-compile-`, `ka-eval-`, ...). Processes that end between two samples
lose their last half second; the machine-wide busy time (/proc/stat) is kept beside the sum to show it.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from builder import config

# First match wins, in this order: the marker a process (or an ancestor) carries -> the kind charged. The
# markers are the builder's own scratch prefixes (config.SCRATCH_PREFIXES).
KINDS = (
    ("compile_child", "compile"),
    (config.SCRATCH_PREFIXES["compile"], "compile"),
    (config.SCRATCH_PREFIXES["baseline"], "baseline children"),
    (config.SCRATCH_PREFIXES["reference"], "reference children"),
    (config.SCRATCH_PREFIXES["profiling"], "profiling"),
    (config.SCRATCH_PREFIXES["evaluation"], "evaluation children"),  # forked ones too: they work in their scratch
    (config.SCRATCH_PREFIXES["zygote"], "zygote (imports once, forks)"),
)
PARENT = "parent (engine, judge)"
OTHER = "other"
SAMPLE_S = 0.5
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds so far) of a live process, or None once it has gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the name may hold spaces and parentheses
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICKS


def _markers(pid: int) -> str:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        cmdline = ""
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        cwd = ""
    return f"{cmdline} {cwd}"


def machine_busy_s() -> float:
    """Busy CPU seconds of the whole machine since boot (every core: user, nice, system, irq, softirq, steal)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return (user + nice + system + irq + softirq + steal) / TICKS


class CpuCensus(threading.Thread):
    """Samples until `stop()`; `mark(name)` starts a new period (e.g. "after the first evaluated record")."""

    def __init__(self, root_pid: int | None = None, interval_s: float = SAMPLE_S) -> None:
        super().__init__(daemon=True)
        self.root_pid = root_pid or os.getpid()
        self.interval_s = interval_s
        self._stop_event = threading.Event()
        self._lock = threading.Lock()
        self._seen: dict[int, float] = {}  # pid -> CPU seconds at its last sample
        self._kind: dict[int, str] = {}  # pid -> kind, fixed at first sight
        self.periods: list[tuple[str, float, float, dict[str, float]]] = []  # (name, wall, machine busy, by kind)
        self._period = ("start", time.monotonic(), machine_busy_s(), {})
        self._sample(count=False)  # what already ran before the census is not charged

    def _kind_of(self, pid: int, parents: dict[int, int]) -> str:
        chain, current = [], pid
        while current > 1 and current not in chain and len(chain) < 64:
            if current in self._kind:
                return self._kind[current]
            chain.append(current)
            if current == self.root_pid:
                return PARENT
            text = _markers(current)
            for marker, kind in KINDS:
                if marker in text:
                    return kind
            current = parents.get(current, 0)
        return OTHER

    def _sample(self, count: bool = True) -> None:
        stats = {}
        for entry in os.scandir("/proc"):
            if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
                stats[int(entry.name)] = stat
        parents = {pid: ppid for pid, (ppid, _) in stats.items()}
        with self._lock:
            charged = self._period[3]
            for pid, (_, cpu_s) in stats.items():
                if pid not in self._kind:
                    self._kind[pid] = self._kind_of(pid, parents)
                grown = cpu_s - self._seen.get(pid, 0.0 if count else cpu_s)
                self._seen[pid] = cpu_s
                if count and grown > 0:
                    kind = self._kind[pid]
                    charged[kind] = charged.get(kind, 0.0) + grown
            for pid in set(self._seen) - set(stats):  # gone: a reused pid starts afresh
                del self._seen[pid]
                self._kind.pop(pid, None)

    def _close_period(self) -> None:
        name, started, busy, charged = self._period
        self.periods.append((name, time.monotonic() - started, machine_busy_s() - busy, dict(charged)))

    def mark(self, name: str) -> None:
        self._sample()
        with self._lock:
            self._close_period()
            self._period = (name, time.monotonic(), machine_busy_s(), {})

    def run(self) -> None:
        while not self._stop_event.wait(self.interval_s):
            self._sample()

    def stop(self) -> list[tuple[str, float, float, dict[str, float]]]:
        """Ends sampling; the periods, each (name, wall s, machine busy core-s, busy core-s by kind)."""
        self._stop_event.set()
        if self.is_alive():
            self.join()
        self._sample()
        with self._lock:
            self._close_period()
        return self.periods


def census_lines(periods, cores: int | None = None) -> list[str]:
    """One line per period: wall, mean busy cores out of `cores`, then each kind's busy core-seconds."""
    cores = cores or os.cpu_count() or 1
    lines = []
    for name, wall, busy, charged in periods:
        kinds = ", ".join(f"{kind} {seconds:.0f}" for kind, seconds in sorted(charged.items(), key=lambda kv: -kv[1]))
        lines.append(f"{name}: {wall:.1f} s wall, {busy / max(wall, 1e-9):.1f} of {cores} cores busy "
                     f"({busy:.0f} core-s; by kind, core-s: {kinds or 'none'})")  # fmt: skip
    return lines


def smt_line(cpus: Path = Path("/sys/devices/system/cpu")) -> str:
    """The cores' hardware threads as the kernel sees them: which logical cores share a physical one. Two engines'
    slices of the cores (device_engines.engine_shares) can share physical cores when siblings lie in both."""
    groups = set()
    for listed in sorted(cpus.glob("cpu[0-9]*/topology/thread_siblings_list")):
        try:
            groups.add(listed.read_text().strip())
        except OSError:
            continue
    if not groups:
        return "SMT siblings: unknown (no topology in sysfs)"
    shared = sorted((g for g in groups if "," in g or "-" in g), key=_first_cpu)
    if not shared:
        return f"SMT siblings: none ({len(groups)} cores, one thread each)"
    return f"SMT siblings: {len(shared)} groups, e.g. {'; '.join(shared[:4])}{' ...' if len(shared) > 4 else ''}"


def _first_cpu(group: str) -> int:
    return int(group.replace("-", ",").split(",")[0])
