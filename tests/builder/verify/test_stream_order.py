"""The stream-order decision on synthetic profiler records (CPU): work on another stream that is not ordered
between the calling stream's spin and marker is caught whatever its duration; work ordered inside the call is
not; the profiler's events are read as kernels, copies and fills only."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from torch.autograd import DeviceType

from builder import config
from builder.verify.child import side_stream, stream_order
from builder.verify.child.stream_order import DeviceWork

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

    from builder.verify.child.failures import CandidateFailure

    def faults(bound, pristine):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    def broken():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(stream_order, "unordered_reason", faults)
    monkeypatch.setattr(torch.cuda, "synchronize", broken)
    with pytest.raises(CandidateFailure, match="illegal memory access"):
        side_stream.side_stream_output_reason(None, [])


IDS = {"default": CALLING, "blocking0": 21, "blocking1": 22}


class FakeDevice:
    """What `unordered_reason` asks of torch.cuda and of the profiler, replayed from recorded work per stream."""

    def __init__(self, monkeypatch, work_by_stream, host_us=100.0, blocking_fails=False):
        import contextlib

        import torch

        self.spins: list[tuple[str, int]] = []
        self.work_by_stream, self.host_us = work_by_stream, host_us

        def blocking(index):
            if blocking_fails:
                raise AttributeError("module 'torch._C._cudart' has no attribute 'cudaStreamCreate'")
            return f"blocking{index}"

        def probe(call, stream, cycles):
            self.spins.append((stream, cycles))
            call()
            spin_us = cycles / 2000.0  # 2 GHz
            spin = DeviceWork("spin", IDS[stream], 0.0, spin_us)
            marker = DeviceWork("spin", spin.stream, spin_us + 50, spin_us + 51)
            return [spin, *self.work_by_stream.get(stream, []), marker], self.host_us

        monkeypatch.setattr(torch.cuda, "default_stream", lambda: "default")
        monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
        monkeypatch.setattr(stream_order, "blocking_stream", blocking)
        monkeypatch.setattr(stream_order, "stream_id", lambda stream: IDS[stream])
        monkeypatch.setattr(stream_order, "snapshot_inputs", lambda pristine: list(pristine))
        monkeypatch.setattr(stream_order, "probe", probe)


BOUND = SimpleNamespace(call=lambda *inputs: None)


def test_the_probe_runs_on_the_default_stream_then_on_blocking_ones(monkeypatch):
    per_thread = DeviceWork("scale_shift", 2, 1.0, 3.0)  # ordered with the legacy stream only
    fake = FakeDevice(monkeypatch, {"blocking0": [per_thread]})
    reason = stream_order.unordered_reason(BOUND, [])
    assert reason.startswith("called on a non-default stream") and "'scale_shift'" in reason
    assert [stream for stream, _ in fake.spins] == ["default", "blocking0"]
    fake = FakeDevice(monkeypatch, {})  # all of it ordered: every probe runs
    assert stream_order.unordered_reason(BOUND, []) is None
    assert [stream for stream, _ in fake.spins] == ["default", "blocking0", "blocking1"]


def test_a_side_stream_on_the_calling_streams_queue_is_caught_on_another_caller(monkeypatch):
    # On blocking0's hardware queue the side stream's work ran in order after the spin and before the marker.
    late = DeviceWork("scale_shift", SIDE, 10_001.0, 10_060.0)
    fake = FakeDevice(monkeypatch, {"blocking1": [late]})
    assert stream_order.unordered_reason(BOUND, []).startswith("called on another non-default stream")
    assert [stream for stream, _ in fake.spins] == ["default", "blocking0", "blocking1"]


def test_a_longer_spin_while_the_host_outlasts_it_and_a_verdict_all_the_same(monkeypatch):
    slow_host = 10_000.0 * 100  # the host took 1 s to launch the call: longer than every spin
    late = DeviceWork("late", SIDE, 1.0, 2.0)
    fake = FakeDevice(monkeypatch, {"default": [late]}, host_us=slow_host)
    reason = stream_order.unordered_reason(BOUND, [])
    cycles = [c for stream, c in fake.spins if stream == "default"]
    assert cycles == [config.STREAM_ORDER_SPIN_CYCLES * 4**i for i in range(config.STREAM_ORDER_ATTEMPTS)]
    assert reason.startswith("called on the default stream")


def test_without_a_blocking_stream_the_default_streams_probe_stands(monkeypatch):
    fake = FakeDevice(monkeypatch, {}, blocking_fails=True)
    assert stream_order.unordered_reason(BOUND, []) is None
    assert [stream for stream, _ in fake.spins] == ["default"]


def test_the_spin_is_lengthened_only_until_it_covers_the_launch(monkeypatch):
    fake = FakeDevice(monkeypatch, {}, host_us=20_000.0)  # 20 ms: the 10 ms spin does not cover it, 40 ms does
    assert stream_order.unordered_reason(BOUND, []) is None
    assert [c for stream, c in fake.spins if stream == "default"] == [
        config.STREAM_ORDER_SPIN_CYCLES * 4**i for i in (0, 1)
    ]
