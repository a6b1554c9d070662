"""Can two Nsight Compute children overlap on one GPU, when one of them is stopped (SIGSTOP) as the device gate
stops its members?

Each child is the builder's own: a sandboxed process (bwrap where usable) under `ncu.ncu_argv`, running a small
torch script that warms up, says `ready`, waits for `go`, runs one matmul inside the NVTX range ncu profiles,
says `done`, waits for `exit`. Scenarios, each timed against `--limit` seconds:

- alone: one child's range, nothing else alive (the reference figure);
- other_before_range_stopped: B started and warmed up, then stopped; A's range runs;
- other_after_range_stopped: A's range done, A stopped before it exits; B's range runs;
- other_after_range_running: A's range done, A alive (not stopped) and not exited; B's range runs.

    python benchmarks/probe_ncu_overlap.py [--limit 60]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from builder import config  # noqa: E402
from builder.profile import ncu  # noqa: E402
from builder.verify.sandbox.process import SandboxedProcess  # noqa: E402

TARGET = f"""
import pathlib, time, torch
here = pathlib.Path('.')
a = torch.randn(2048, 2048, device='cuda')
(a @ a).sum().item()
(here / 'ready').write_text('1')
while not (here / 'go').exists():
    time.sleep(0.01)
with torch.cuda.nvtx.range({config.NVTX_CANDIDATE_RANGE!r}):
    b = a @ a
torch.cuda.synchronize()
(here / 'done').write_text('1')
while not (here / 'exit').exists():
    time.sleep(0.01)
"""


class Child:
    def __init__(self, name: str, root: Path) -> None:
        self.scratch = root / name
        self.scratch.mkdir()
        (self.scratch / "target.py").write_text(TARGET)
        argv = [*ncu.ncu_argv(str(self.scratch / "profile.ncu-rep")), sys.executable, "target.py"]
        self.process = SandboxedProcess(argv, self.scratch)
        self.stopped = False

    def stop(self) -> None:
        self.process.pause()
        self.stopped = True

    def wait_for(self, word: str, limit_s: float) -> float | None:
        started = time.monotonic()
        while not (self.scratch / word).exists():
            if time.monotonic() - started > limit_s or not self.process.alive():
                return None
            time.sleep(0.01)
        return time.monotonic() - started

    def say(self, word: str) -> None:
        (self.scratch / word).write_text("1")

    def end(self) -> str:
        if self.stopped:
            self.process.resume()
        self.say("go")  # a child stopped before its range runs it now, then exits
        self.say("exit")
        outcome = self.process.wait(60.0)
        report = "report" if (self.scratch / "profile.ncu-rep").is_file() else "no report"
        return f"exit {outcome.returncode}, {report}, timed_out={outcome.timed_out}"


def scenario(name: str, root: Path, limit_s: float) -> None:
    folder = root / name
    folder.mkdir()
    a = Child("a", folder)
    b = Child("b", folder) if name != "alone" else None
    for child in filter(None, (a, b)):
        if child.wait_for("ready", 120.0) is None:
            print(f"{name}: a child never said ready: {child.end()}", flush=True)
            return
    if name == "other_before_range_stopped":
        b.stop()
    a.say("go")
    a_range = a.wait_for("done", limit_s)
    line = f"{name}: A's range {'HUNG' if a_range is None else f'{a_range:.2f} s'}"
    if b is not None and name != "other_before_range_stopped":
        if name == "other_after_range_stopped":
            a.stop()
        b.say("go")
        b_range = b.wait_for("done", limit_s)
        line += f", B's range {'HUNG' if b_range is None else f'{b_range:.2f} s'}"
    endings = [child.end() for child in filter(None, (a, b))]
    print(f"{line}; {'; '.join(endings)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=float, default=60.0, help="seconds a range may take before it counts as hung")
    args = parser.parse_args()
    if ncu.ncu_available() is None:
        sys.exit("probe_ncu_overlap: ncu not found on PATH")
    root = Path(tempfile.mkdtemp(prefix="ka-ncu-overlap-"))
    for name in ("alone", "other_before_range_stopped", "other_after_range_stopped", "other_after_range_running"):
        scenario(name, root, args.limit)


if __name__ == "__main__":
    main()
