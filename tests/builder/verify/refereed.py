"""A candidate's timing window served and refereed in one process, for trusted fakes: the child's side
(`timing_window.serve_window`) on a thread, the parent's (`referee.Referee`, `judge/window.judge_window`) here,
talking through the real messages over an in-process link."""

from __future__ import annotations

import tempfile
import threading
from typing import Any

from builder.verify.child import timing
from builder.verify.child.window import serve_window
from builder.verify.judge.referee import Referee
from builder.verify.judge.window import judge_window
from builder.verify.protocol.window import QueueLink


def run_window(sets: timing.TimingSets, job: dict[str, Any], device: str = "cpu", samples: list | None = None,
               reference: dict | None = None, serve=serve_window, after_window=None) -> dict[str, Any]:  # fmt: skip
    """The judged window's fields (runtime, eager_window, speedup_blocks, timing_method) plus `report` and `verdict`.
    `after_window(referee)` runs where the engine gives the device back (`Referee.run`)."""
    parent, child = QueueLink.pair()
    reveal_dir = tempfile.mkdtemp(prefix="ka-test-window-")
    server = threading.Thread(target=serve, args=(child, sets, reveal_dir), daemon=True)
    server.start()
    manifest = {"timed_samples": samples or [], "output_bytes": [1 << 20]}
    referee = Referee(parent, reveal_dir, manifest, dict(job, backend=device))
    report = referee.run(after_window=(lambda: after_window(referee)) if after_window else None)
    server.join(timeout=120)
    verdict = judge_window(report, reference or {}, device, float(job["atol"]), float(job["rtol"]))
    return {**verdict.fields, "report": report, "verdict": verdict, "first_outputs": sets.first_outputs()}


def time_candidate(binding: Any, task_module: Any, job: dict[str, Any], device: str = "cpu", **kwargs: Any) -> dict:
    """prepare_timing, then the refereed window."""
    sets = timing.prepare_timing(binding, task_module, dict(job, backend=device), device)
    return run_window(sets, job, device, **kwargs)
