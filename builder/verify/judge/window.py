"""A refereed timing window turned into the record's figures and flags (trusted parent side).

The runtimes, eager's in-window runtimes and the per-block speedups come from the claims the parent received
during the window (never from the child's result file), and stand only if the parent's clock accounts for them:

- `timing_mismatch` when, per call, the parent's clock holds more time beyond the claimed times in the
  candidate's half-blocks than in eager's (the same harness in the same window) by more than the stated margin
  (config.TIMING_ACCOUNT_*; `referee.accounting_reason`, which the referee also reads to decide whether a window
  may stop early), when a half-block claims more time than passed, when a revealed output is not the one
  the child committed to by digest, or when the hand-shake broke;
- `lazy_output` when a timed call returned something other than plain tensors;
- a revealed output that disagrees with the clean reference of its inputs makes the kernel incorrect.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from builder import config
from builder.verify.judge.referee import HalfBlock, WindowReport, accounting_reason
from builder.verify.protocol.plan import block_rule, describe_method, runtime_stats


@dataclass
class WindowVerdict:
    fields: dict[str, Any] = field(default_factory=dict)  # runtime, eager_window, speedup_blocks, timing_method
    flags: dict[str, str] = field(default_factory=dict)  # flag -> why
    error: str | None = None  # a timed output was wrong: incorrect
    runtime_error: str | None = None  # the candidate raised while timed


def judge_window(report: WindowReport, reference: Any, device: str, atol: float, rtol: float) -> WindowVerdict:
    """`reference` maps `timed{m}` to the clean reference outputs of the sampled calls."""
    verdict = WindowVerdict()
    if report.failure_kind == "candidate_error":
        verdict.runtime_error = f"while timing: {report.failure}"
    elif report.failure_kind == "lazy_output":
        verdict.flags["lazy_output"] = f"a timed call: {report.failure}"
    elif report.failure_kind == "stale_output":
        verdict.error = report.failure
    elif report.failure:
        verdict.flags["timing_mismatch"] = str(report.failure)
    _judge_reveals(report, reference, atol, rtol, verdict)
    candidate = [h for h in report.halves if h.kind == "candidate"]
    eager = [h for h in report.halves if h.kind == "eager"]
    if candidate and eager and not verdict.runtime_error:
        reason = accounting_reason(candidate, eager, device)
        if reason:
            verdict.flags.setdefault("timing_mismatch", reason)
        verdict.fields = _figures(report, candidate, eager, device)
    elif not report.failure:
        verdict.flags.setdefault("timing_mismatch", "the window ended before a timed call of each side")
    return verdict


def _judge_reveals(report: WindowReport, reference: Any, atol: float, rtol: float, verdict: WindowVerdict) -> None:
    from builder.verify.judge.outputs import compare_named, side_by_side
    from builder.verify.protocol.compare import Comparison
    from builder.verify.protocol.tensor_files import tensors_of
    from builder.verify.protocol.window import digest

    committed = report.digests()

    def judged(m: int) -> Comparison | None:
        """None where the revealed output is not the one committed, else its comparison with the reference."""
        values = report.revealed[m]
        tensors = tensors_of(values) if not isinstance(values, str) else None
        if tensors is None or digest(tensors) != committed.get(m):
            return None
        return compare_named(values, reference.get(f"timed{m}"), atol, rtol)

    revealed = sorted(report.revealed)
    for m, comparison in zip(revealed, side_by_side([partial(judged, m) for m in revealed]), strict=True):
        if comparison is None:
            verdict.flags.setdefault("timing_mismatch", f"timed call {m + 1}: the output revealed after its "
                                     "half-block is not the one committed to when the half-block ended")  # fmt: skip
        elif not comparison.ok and verdict.error is None:
            verdict.error = f"timed call {m + 1} (fresh inputs): {comparison.error}"


def _figures(report: WindowReport, candidate: list[HalfBlock], eager: list[HalfBlock], device: str) -> dict[str, Any]:
    cand_ms = [ms for h in candidate for ms in h.claimed_ms()]
    eager_ms = [ms for h in eager for ms in h.claimed_ms()]
    ratios = [statistics.median(e.claimed_ms()) / max(statistics.median(c.claimed_ms()), 1e-9)
              for c, e in zip(candidate, eager, strict=False)]  # fmt: skip
    method = describe_method(
        device, config.INPUT_SETS, len(cand_ms), config.INPUT_SETS, report.warmed, fresh_inputs=True
    )
    method += (
        f"; PyTorch eager timed the same way in the same window, in half-blocks alternating with the candidate's "
        f"(first side swapped every block), {len(ratios)} blocks of {report.per_block} calls a side{block_rule()} "
        "(speedup = eager median / candidate median over the window; spread from per-block ratios); every timed call "
        "on fresh inputs drawn from the verifier's seeds; each half-block timed on the verifier's own clock, which "
        "must account for the claimed times; sampled outputs committed by digest and judged against the clean "
        "reference"
    )
    if report.stopped_early:
        spread = config.TIMING_STABLE_SPREAD
        method += f"; {config.TIMING_SETTLED_CLAUSE} the per-block ratios and kernel medians varied by <= {spread:.0%} (IQR/median)"
    return {"runtime": runtime_stats(cand_ms), "eager_window": runtime_stats(eager_ms), "speedup_blocks": ratios,
            "timing_method": method}  # fmt: skip
