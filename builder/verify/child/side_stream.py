"""The side-stream check (untrusted child side, CUDA): does a candidate's work run past the stream it was called
on? Three halves, with the checks unless said otherwise: the order half (`stream_order.py`) finds device work on
another stream that was not ordered within the call on the calling stream, whatever its duration, from the
profiler's record of every kernel's stream and device interval; the output half sees the output change after
forward returned; the clock half sees a device-wide synchronize wait on once the calling stream's work is done,
and compares clocks, so it runs once the device is the candidate's alone, just before its timing
window. `timing.CallTimer` times the current stream's work only (the host's launch and wake-up stay out), so such
work falls outside its intervals: these are what disqualify it."""

from __future__ import annotations

import time
from typing import Any

from builder import config
from builder.verify.protocol.compare import flatten_outputs, output_nbytes, same_bits, snapshot


def side_stream_output_reason(bound: Any, pristine: list[Any]) -> str | None:
    """CUDA, with the checks: the order half's reason (`stream_order.unordered_reason`), else the output half's."""
    return _order_reason(bound, pristine) or _output_reason(bound, pristine)


def _order_reason(bound: Any, pristine: list[Any]) -> str | None:
    """`stream_order.unordered_reason`; None where the profiler fails (not the candidate's doing), a
    CandidateFailure where the candidate raised or left the device unusable."""
    import torch

    from builder.verify.child.failures import CandidateFailure, exception_text
    from builder.verify.child.stream_order import unordered_reason

    try:
        return unordered_reason(bound, pristine)
    except CandidateFailure:
        raise
    except Exception as exc:  # noqa: BLE001 - the profiler's failure, or a fault of the candidate's work
        try:
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001 - the device is broken: the candidate's work faulted
            raise CandidateFailure(exception_text(exc)) from None
        return None


def _output_reason(bound: Any, pristine: list[Any]) -> str | None:
    """Is work still running elsewhere when forward returns? A stream-ordered copy of the output taken at once
    differs from the output after a device-wide sync."""
    import torch

    from builder.verify.child.poison import poison_free_memory

    inputs = snapshot(pristine)
    torch.cuda.synchronize()
    probe = bound.call(*snapshot(pristine))
    torch.cuda.synchronize()
    sizes = output_nbytes(probe)
    del probe  # freed BEFORE the poison: its block holds right answers the next empty_like could get
    poison_free_memory("cuda", sizes)
    out = bound.call(*inputs)
    early = [t.clone() for t in flatten_outputs(out) or []]  # same stream, no sync: stream-ordered copy
    torch.cuda.synchronize()
    late = flatten_outputs(out) or []
    if any(not same_bits(a, b) for a, b in zip(early, late, strict=True)):
        return "the output changed after forward returned: work was still running on another stream"
    return None


def side_stream_timing_reason(bound: Any, pristine: list[Any]) -> str | None:
    """CUDA: after the call's own stream has finished, a device-wide synchronize still waits (work on another
    stream). Compares clocks: run only while the device is the candidate's alone. `clock_gap_reason` says what
    the figures mean."""
    import torch

    def wait_past_stream(call) -> float:
        """Host ms a device-wide synchronize waits once the current stream's work queued by `call` is done."""
        torch.cuda.synchronize()
        call()
        stream_done = torch.cuda.Event()
        stream_done.record()
        stream_done.synchronize()
        done = time.perf_counter()
        torch.cuda.synchronize()
        return (time.perf_counter() - done) * 1e3

    gaps_ms, idle_ms = [], []
    with torch.no_grad():  # as in the checks: parameters require grad, and out= ops refuse autograd
        for _ in range(config.SIDE_STREAM_CALLS):
            inputs = snapshot(pristine)
            past_stream = wait_past_stream(lambda inputs=inputs: bound.call(*inputs))
            idle_ms.append(wait_past_stream(lambda: None))
            gaps_ms.append(past_stream - idle_ms[-1])
    return clock_gap_reason(gaps_ms, idle_ms)


def clock_gap_reason(gaps_ms: list[float], idle_ms: list[float]) -> str | None:
    """The clock half's verdict. Each call gives a gap: the host's wait for a device-wide synchronize once the
    calling stream's work is done, less the same wait after the empty call that follows it (`idle_ms`, the
    clocks' own cost). Work hidden on another stream shows in every call, while the device's other tenants and a
    loaded host strike some calls: the least gap is weighed.

    The current stream's work and the host's time inside the call both stay out of the gap: a kernel still
    running on the calling stream when the call returns ends before the wait starts, and a slow host before a
    tiny kernel only delays it. Events around the whole call counted that host time as the stream's and missed
    0.3 ms left on a side stream in 7 of 12 trials. Work another stream finishes before the calling stream's does
    is the order half's to find."""
    least_ms = min(gaps_ms)
    if least_ms > config.SIDE_STREAM_MIN_GAP_MS:
        return (f"the device worked at least {least_ms:.3f} ms after the calling stream's work was done in each of "
                f"{len(gaps_ms)} calls (a device-synchronized host clock, less the {min(idle_ms):.3f}-"
                f"{max(idle_ms):.3f} ms an empty call's synchronize took): work was still running on another stream")  # fmt: skip
    return None
