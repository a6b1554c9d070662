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
    """CUDA: events on the current stream report much less time than a device-synchronized host clock (work on
    another stream). Compares clocks: run only while the device is the candidate's alone.

    The host clock also holds the host's own cost of a launch and a synchronize, which a loaded machine
    stretches (a correct 0.18 ms kernel once read 0.37 ms on it). So the same clocks are read around an empty
    interval beside every call, and that cost is taken off; and each figure is the least of its calls, since
    noise only ever adds time while work hidden on another stream shows in every call."""
    import torch

    def clocks(call) -> tuple[float, float]:
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin = time.perf_counter()
        start.record()
        call()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end), (time.perf_counter() - begin) * 1e3

    event_ms, host_ms, idle_ms = [], [], []
    with torch.no_grad():  # as in the checks: parameters require grad, and out= ops refuse autograd
        for _ in range(config.SIDE_STREAM_CALLS):
            inputs = snapshot(pristine)
            event, host = clocks(lambda inputs=inputs: bound.call(*inputs))
            event_ms.append(event)
            host_ms.append(host)
            idle_ms.append(clocks(lambda: None)[1])
    event, host, idle = min(event_ms), min(host_ms), min(idle_ms)
    gap = host - idle - event
    if gap > max(config.SIDE_STREAM_TOLERANCE * host, config.SIDE_STREAM_MIN_GAP_MS):
        return (f"events on the current stream saw {event:.3f} ms, a device-synchronized host clock {host:.3f} ms "
                f"({idle:.3f} ms of it the clocks' own cost)")  # fmt: skip
    return None
