"""Is every piece of device work a call launches ordered within the call on the stream it was called on? (untrusted
child side, CUDA; the decision itself is plain Python on recorded intervals).

The probe: on the calling stream a device spin is enqueued, then the call, then a marker once the call returns,
all under torch.profiler, which records every kernel, copy and fill with its stream and its device start and end.
The spin outlasts the host's launch of the call (checked: the spin's device time against the host's time from
its launch to the call's return; a longer spin otherwise), so everything the call launched was enqueued while the
calling stream was still spinning. Work on another stream that is ordered after the call's start on the calling
stream cannot begin before the spin ends; work ordered before the call's end there ends before the marker
begins. Work on another stream that began before the spin ended, or ended after the marker began, was not
ordered within the call: `side_stream`, whatever its duration (a short kernel finishes behind the timing's spin,
where neither the output check nor the clocks see it).

A kernel must be right on whichever stream it is called on, so the probe runs on the default stream, as the checks
and the timing call it, and on two fresh blocking streams. A launch without a stream (`kernel<<<grid, block>>>`,
KernelBench's convention) goes to the legacy default stream, which synchronises with every blocking stream: it is
ordered with any of these callers. Work on the per-thread default stream, or on a blocking stream of the kernel's
own, is ordered with a default-stream caller only through that implicit synchronisation, which a caller on any
other stream does not get: the probes on the blocking streams find it. A probe sees unordered work only where the
other stream runs beside the calling one; two streams on one hardware work queue run in order, as if joined. The
driver spreads streams over its queues as it makes them, so three calling streams made one after another seldom
all share the queue of the kernel's other stream.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from builder import config

DEVICE_WORK = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})  # kineto activity types that occupy a stream


@dataclass(frozen=True)
class DeviceWork:
    """One kernel, copy or fill as the profiler saw it: its stream and device interval (us, one clock)."""

    name: str
    stream: int
    start_us: float
    end_us: float


def device_work(events: Iterable[Any]) -> list[DeviceWork]:
    """The kernels, copies and fills among torch.profiler's events (annotations and synchronisation records out)."""
    from torch.autograd import DeviceType

    found = []
    for event in events:
        if event.device_type != DeviceType.CUDA or getattr(event, "device_resource_id", None) is None:
            continue
        kind = getattr(event, "activity_type", None)
        if isinstance(kind, str) and kind:
            if kind not in DEVICE_WORK:
                continue
        elif "Sync" in event.name or "Wait" in event.name:  # a torch without activity types: by name
            continue
        found.append(DeviceWork(event.name, int(event.device_resource_id), float(event.time_range.start),
                                float(event.time_range.end)))  # fmt: skip
    return found


def unordered(work: list[DeviceWork], calling: int) -> list[DeviceWork] | None:
    """Work on streams other than `calling` that was not ordered within the call: it began before the spin (the
    calling stream's first work) ended, or ended after the marker (its last) began. None when the calling stream
    does not show both."""
    own = sorted((w for w in work if w.stream == calling), key=lambda w: w.start_us)
    if len(own) < 2:
        return None
    spin, marker = own[0], own[-1]
    return [w for w in work if w.stream != calling and (w.start_us < spin.end_us or w.end_us > marker.start_us)]


def describe(found: list[DeviceWork], work: list[DeviceWork], calling: int, where: str) -> str:
    """One line naming the first unordered piece of work and how it escaped."""
    own = sorted((w for w in work if w.stream == calling), key=lambda w: w.start_us)
    first = min(found, key=lambda w: w.start_us)
    how = "began before the call began on it" if first.start_us < own[0].end_us else "ended after the call had ended"
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return (f"called on {where}, device work on another stream was not ordered within the call on the calling "
            f"stream: {first.name[:120]!r} ({first.end_us - first.start_us:.1f} us) {how}{more}")  # fmt: skip


def stream_id(stream: Any) -> int | None:
    """The profiler's id of `stream`: where a one-element fill on it ran (ids are stable within a context)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with torch.cuda.stream(stream):
            torch.empty(1, device="cuda").fill_(0.0)
        torch.cuda.synchronize()
    streams = {w.stream for w in device_work(prof.events())}
    return streams.pop() if len(streams) == 1 else None


def probe(call: Callable[[], Any], stream: Any, spin_cycles: int) -> tuple[list[DeviceWork], float]:
    """The call on `stream` between a spin of `spin_cycles` and a marker, profiled: (its device work, the host's
    microseconds from the spin's launch to the call's return)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        torch.cuda.synchronize()
        with torch.cuda.stream(stream):
            began = time.perf_counter()
            torch.cuda._sleep(spin_cycles)
            out = call()
            host_us = (time.perf_counter() - began) * 1e6
            torch.cuda._sleep(1)  # the marker
        torch.cuda.synchronize()
    del out  # freed once every stream's work is done: its memory goes back to no one still writing it
    return device_work(prof.events()), host_us


def covered(work: list[DeviceWork], calling: int, host_us: float) -> bool:
    """The spin's device time exceeded the host's time from its launch to the call's return: everything the call
    launched was enqueued while it ran (two durations compared, no alignment of the host's and the device's clocks
    needed; the spin begins no sooner than it is launched)."""
    own = sorted((w for w in work if w.stream == calling), key=lambda w: w.start_us)
    return bool(own) and own[0].end_us - own[0].start_us > host_us + config.STREAM_ORDER_COVER_MARGIN_US


def unordered_reason(bound: Any, pristine: list[Any]) -> str | None:
    """CUDA: why some of the call's device work was not ordered within the call, on the default stream or on one of
    two fresh blocking ones; None when all of it was, or when the profiler cannot tell."""
    import torch

    with torch.no_grad():
        for where, make in (
            ("the default stream", torch.cuda.default_stream),
            ("a non-default stream", lambda: blocking_stream(0)),
            ("another non-default stream", lambda: blocking_stream(1)),
        ):
            try:
                stream = make()
            except Exception:  # noqa: BLE001 - a torch without the runtime binding: the default stream's probe stands
                continue
            calling = stream_id(stream)
            if calling is None:
                continue
            with torch.cuda.stream(stream):
                _call(bound, snapshot_inputs(pristine))  # a first call on this stream: lazy set-up stays out
            cycles = config.STREAM_ORDER_SPIN_CYCLES
            for _ in range(config.STREAM_ORDER_ATTEMPTS):
                inputs = snapshot_inputs(pristine)
                work, host_us = probe(lambda inputs=inputs: _call(bound, inputs), stream, cycles)
                if covered(work, calling, host_us):
                    break
                # The host took longer to launch the call than the spin lasted (or the call waited for the device,
                # which a longer spin only lengthens): judged all the same after the last attempt.
                cycles *= 4
            found = unordered(work, calling)
            if found:
                return describe(found, work, calling, where)
    return None


@functools.cache
def blocking_stream(index: int) -> Any:
    """Blocking stream `index`: made with cudaStreamCreate's default flags (the legacy default stream synchronises
    with it), kept for the life of this single-use process; torch's own streams are non-blocking."""
    import ctypes

    import torch

    handle = ctypes.c_void_p()
    cudart = torch.cuda.cudart()
    if cudart.cudaStreamCreate(ctypes.addressof(handle)) != cudart.cudaError.success:
        raise RuntimeError("cudaStreamCreate failed")
    return torch.cuda.ExternalStream(handle.value)


def snapshot_inputs(pristine: list[Any]) -> list[Any]:
    """Fresh copies of the inputs, finished before a probe begins (a kernel not ordered with the calling stream
    must never read a copy still being made)."""
    import torch

    from builder.verify.protocol.compare import snapshot

    inputs = snapshot(pristine)
    torch.cuda.synchronize()
    return inputs


def _call(bound: Any, inputs: list[Any]) -> Any:
    """One call of the candidate; its exception is its failure."""
    from builder.verify.child.failures import CandidateFailure, exception_text

    try:
        return bound.call(*inputs)
    except Exception as exc:  # noqa: BLE001 - untrusted code
        raise CandidateFailure(exception_text(exc)) from None
