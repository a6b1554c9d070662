"""The stream-order decision on synthetic profiler records (CPU): work on another stream that is not ordered
between the calling stream's spin and marker is caught whatever its duration; work ordered inside the call is
not; the profiler's events are read as kernels, copies and fills only."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from torch.autograd import DeviceType

from builder import config
from builder.verify import side_stream, stream_order
from builder.verify.stream_order import DeviceWork

CALLING, SIDE = 7, 13
SPIN = DeviceWork("spin_kernel", CALLING, 0.0, 10_000.0)  # 10 ms
MARKER = DeviceWork("spin_kernel", CALLING, 10_050.0, 10_051.0)


def run(*others: DeviceWork) -> list[DeviceWork]:
    return [SPIN, *others, MARKER]


def test_a_short_kernel_that_waits_for_nothing_runs_during_the_spin():
    short = DeviceWork("scale_shift", SIDE, 12.0, 14.5)  # 2.5 us, launched while the calling stream spun
    assert stream_order.unordered(run(short), CALLING) == [short]


def test_a_kernel_ordered_after_the_start_but_never_joined_ends_after_the_marker_began():
    tail = DeviceWork("scale_shift", SIDE, 10_001.0, 10_052.0)
    assert stream_order.unordered(run(tail), CALLING) == [tail]


def test_a_long_kernel_on_another_stream_is_caught_either_way():
    long = DeviceWork("slow", SIDE, 5.0, 12_000.0)
    assert stream_order.unordered(run(long), CALLING) == [long]


def test_work_ordered_inside_the_call_is_not_caught():
    joined = DeviceWork("scale_shift", SIDE, 10_001.0, 10_040.0)  # after the spin, before the marker
    own = DeviceWork("own", CALLING, 10_040.5, 10_049.0)
    touching = DeviceWork("edge", SIDE + 1, SPIN.end_us, MARKER.start_us)  # the same clock tick at both ends
    assert stream_order.unordered(run(joined, own, touching), CALLING) == []


def test_without_a_spin_and_a_marker_the_probe_cannot_tell():
    assert stream_order.unordered([SPIN, DeviceWork("x", SIDE, 1.0, 2.0)], CALLING) is None
    assert stream_order.unordered([DeviceWork("x", SIDE, 1.0, 2.0)], CALLING) is None


def test_the_reason_names_the_work_and_how_it_escaped():
    short = DeviceWork("scale_shift", SIDE, 12.0, 14.5)
    work = run(short, DeviceWork("other", SIDE, 13.0, 20.0))
    reason = stream_order.describe(stream_order.unordered(work, CALLING), work, CALLING, "a non-default stream")
    assert reason.startswith("called on a non-default stream")
    assert "'scale_shift' (2.5 us) began before the call began on it (and 1 more)" in reason
    tail = DeviceWork("tail", SIDE, 10_001.0, 10_060.0)
    reason = stream_order.describe([tail], run(tail), CALLING, "the default stream")
    assert "ended after the call had ended" in reason


def test_the_spin_must_outlast_the_hosts_launch_of_the_call():
    margin = config.STREAM_ORDER_COVER_MARGIN_US
    assert stream_order.covered(run(), CALLING, host_us=10_000.0 - margin - 1)
    assert not stream_order.covered(run(), CALLING, host_us=10_000.0 - margin + 1)
    assert not stream_order.covered([], CALLING, host_us=1.0)


def test_a_call_that_waits_for_the_device_is_not_given_longer_spins():
    assert stream_order.waited_for_device(run(), CALLING, host_us=10_000.0)
    assert not stream_order.waited_for_device(run(), CALLING, host_us=9_000.0)


def event(name, stream, start, end, device_type=DeviceType.CUDA, **extra):
    return SimpleNamespace(name=name, device_type=device_type, device_resource_id=stream,
                           time_range=SimpleNamespace(start=start, end=end), **extra)  # fmt: skip


def test_only_kernels_copies_and_fills_count_as_device_work():
    events = [
        event("scale_shift", SIDE, 1, 2, activity_type="kernel"),
        event("Memcpy DtoD (Device -> Device)", SIDE, 3, 4, activity_type="gpu_memcpy"),
        event("Memset (Device)", SIDE, 5, 6, activity_type="gpu_memset"),
        event("my_range", SIDE, 0, 9, activity_type="gpu_user_annotation"),
        event("Stream Wait Event", SIDE, 0, 9, activity_type="cuda_sync"),
        event("aten::add", 0, 0, 9, device_type=DeviceType.CPU, activity_type="cpu_op"),
        event("no stream", None, 0, 9, activity_type="kernel"),
        event("Event Sync", SIDE, 0, 9),  # an older torch without activity types: by name
        event("older_kernel", SIDE, 7, 8),
    ]
    names = [w.name for w in stream_order.device_work(events)]
    assert names == ["scale_shift", "Memcpy DtoD (Device -> Device)", "Memset (Device)", "older_kernel"]


def test_the_order_half_speaks_first_and_a_profiler_failure_is_not_the_candidates(monkeypatch):
    import torch

    monkeypatch.setattr(side_stream, "_output_reason", lambda bound, pristine: "the output changed")
    monkeypatch.setattr(stream_order, "unordered_reason", lambda bound, pristine: "called on the default stream, ...")
    assert side_stream.side_stream_output_reason(None, []) == "called on the default stream, ..."

    def profiler_fails(bound, pristine):
        raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")

    monkeypatch.setattr(stream_order, "unordered_reason", profiler_fails)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)  # the device itself is fine
    assert side_stream.side_stream_output_reason(None, []) == "the output changed"


def test_a_fault_that_breaks_the_device_is_the_candidates_failure(monkeypatch):
    import torch

    from builder.verify.checks import CandidateFailure

    def faults(bound, pristine):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    def broken():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(stream_order, "unordered_reason", faults)
    monkeypatch.setattr(torch.cuda, "synchronize", broken)
    with pytest.raises(CandidateFailure, match="illegal memory access"):
        side_stream.side_stream_output_reason(None, [])
