"""What one look for a sandboxed run's processes costs on a busy machine, by each way of looking.

The device gate stops every other member of a device for a timing window and continues them after it, and each
stop or continuation looks over every process of the machine for the member's processes (`process_tree.marked`):
about two dozen looks a window, and a machine with two busy GPUs has about twice the processes of one. Run this
beside a build or the throughput bench; every `--every` seconds it times one look of each way:

- `psutil_environ`: psutil's process iteration, reading each process's environment for the run's marker;
- `environ`: the same reading over a listing of /proc;
- `namespace`: each process's PID namespace link, compared with the run's (what a bwrap run is looked up by).

Reading another process's environment reads its memory, behind that process's memory lock; a namespace is a link.

    python benchmarks/probe_member_scan.py [--seconds 120] [--every 0.5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from builder.verify.sandbox import process_tree  # noqa: E402

NO_RUN = "probe-of-no-run"
NO_NAMESPACE = "pid:[0]"  # no process is in it: every process is looked at, none is found


def psutil_environ() -> int:
    needle = f"{process_tree.MARKER_ENV}={NO_RUN}".encode()
    found = 0
    for proc in psutil.process_iter(["pid"]):
        try:
            with open(f"/proc/{proc.pid}/environ", "rb") as fh:
                found += needle in fh.read().split(b"\0")
        except OSError:
            continue
    return found


WAYS = {
    "psutil_environ": psutil_environ,
    "environ": lambda: len(process_tree.marked(NO_RUN)),
    "namespace": lambda: len(process_tree.marked(NO_RUN, NO_NAMESPACE)),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--every", type=float, default=0.5)
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.every <= 0:
        parser.error("--seconds and --every must be positive")
    looks: dict[str, list[float]] = {name: [] for name in WAYS}
    processes: list[int] = []
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        processes.append(sum(1 for name in os.listdir("/proc") if name.isdigit()))
        for name, way in WAYS.items():
            started = time.perf_counter()
            way()
            looks[name].append(time.perf_counter() - started)
        time.sleep(args.every)
    print(f"processes on the machine: median {statistics.median(processes):.0f}, most {max(processes)}")
    for name, times in looks.items():
        p90 = statistics.quantiles(times, n=10)[-1] if len(times) > 1 else times[0]
        print(f"{name:16s} one look: median {statistics.median(times) * 1000:7.2f} ms, p90 {p90 * 1000:7.2f} ms, "
              f"most {max(times) * 1000:7.2f} ms ({len(times)} looks)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
