"""The side-stream check (untrusted child side, CUDA): does a candidate's work run past the stream it was called
on? Three halves, with the checks unless said otherwise: the order half (`stream_order.py`) finds device work on
another stream that was not ordered within the call on the calling stream, whatever its duration, from the
profiler's record of every kernel's stream and device interval; the output half sees the output change after
forward returned; the clock half sees events on the current stream miss time that a device-wide synchronize
waits for, and compares clocks, so it runs once the device is the candidate's alone, just before its timing
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
    """CUDA: after the call returns, the device works on longer than events on the current stream saw (work on
    another stream). Compares clocks: run only while the device is the candidate's alone. `clock_gap_reason`
    says what the figures mean."""
    import torch

    def clocks(call) -> tuple[float, float]:
        """The current stream's events around `call`, and the host's wait from its return to a device-wide sync."""
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        returned = time.perf_counter()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end), (time.perf_counter() - returned) * 1e3

    event_ms, after_return_ms, idle_ms = [], [], []
    with torch.no_grad():  # as in the checks: parameters require grad, and out= ops refuse autograd
        for _ in range(config.SIDE_STREAM_CALLS):
            inputs = snapshot(pristine)
            event, after_return = clocks(lambda inputs=inputs: bound.call(*inputs))
            event_ms.append(event)
            after_return_ms.append(after_return)
            idle_ms.append(clocks(lambda: None)[1])
    return clock_gap_reason(min(event_ms), min(after_return_ms), min(idle_ms))


def clock_gap_reason(event_ms: float, after_return_ms: float, idle_ms: float) -> str | None:
    """The clock half's verdict on its least figures (noise only ever adds time, while work hidden on another
    stream shows in every call): `event_ms`, the current stream's events around a call; `after_return_ms`, the
    host's wait from the call's return to a device-wide synchronize's end; `idle_ms`, the same wait after an empty
    call, the clocks' own cost.

    The device's work left when the call returns is `after_return_ms - idle_ms`. Work on the current stream lies
    within its events, so more than they saw is work elsewhere. The host's time inside the call stays out: the
    events need not see the host's work before the call's first launch (the start event may reach the device with
    that launch), and a loaded machine stretches that work several times. Compared with the whole host clock, a
    correct 0.004 ms kernel once read 0.331 ms, 0.146 ms of it the clocks' own cost, and was flagged. Work another
    stream finishes while the call still runs on the host is the order half's to find."""
    left_ms = after_return_ms - idle_ms
    if left_ms - event_ms > max(config.SIDE_STREAM_TOLERANCE * left_ms, config.SIDE_STREAM_MIN_GAP_MS):
        return (f"events on the current stream saw {event_ms:.3f} ms, while the device worked {left_ms:.3f} ms after "
                f"the call returned (a device-synchronized host clock, less {idle_ms:.3f} ms of the clocks' own "
                "cost)")  # fmt: skip
    return None
