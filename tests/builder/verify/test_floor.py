"""The runtime floor of a CUDA record (bytes it must move at peak DRAM bandwidth), speed_of_light and the
implausible_runtime flag, on synthetic figures; the clean reference's manifest gives the sizes."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from builder import config
from builder.candidates import Candidate
from builder.tasks import load_task_module
from builder.tasks.suite import describe_task_file
from builder.verify.child.reference import compute_reference
from builder.verify.judge import floor, verdict

TASKS = Path(__file__).resolve().parents[2] / "fixtures" / "tasks" / "level1"
H100_SXM = 2.0 * 2619e6 * 5120 / 8  # bytes/s: 3.35 TB/s
MB64 = 16 * 2**20 * 4  # a 16 M-element float32 tensor


def manifest(outputs, targets=(), responsive=()):
    return {"output_bytes": list(outputs), "target_bytes": list(targets),
            "responsive_targets": [[i, "input", i] for i in responsive]}  # fmt: skip


def test_peak_bandwidth_is_two_transfers_per_memory_clock_over_the_bus():
    assert floor.dram_bandwidth(2619, 5120) == pytest.approx(3.352e12, rel=1e-3)


def test_the_floor_counts_outputs_and_the_inputs_the_output_responded_to():
    # out = f(x, w): x and w move the output, the third target does not
    assert floor.floor_bytes(manifest([100], [40, 8, 1000], responsive=[0, 1])) == 148
    assert floor.floor_bytes(manifest([100, 20])) == 120  # a manifest without target sizes: outputs alone
    assert floor.floor_bytes({"output_bytes": None}) is None
    assert floor.floor_ms(manifest([10**9]), 1e12) == pytest.approx(1.0)
    assert floor.floor_ms(manifest([10**9]), None) is None


def test_a_16m_element_op_cannot_run_in_two_microseconds_on_an_h100():
    floor_ms = floor.floor_ms(manifest([MB64], [MB64], responsive=[0]), H100_SXM)
    assert floor_ms == pytest.approx(0.04, rel=0.01)
    speed, why = floor.judge_runtime(0.0018, floor_ms)
    assert speed == pytest.approx(22.2, rel=0.01) and why and "faster than the device's DRAM" in why


def test_an_honest_memory_bound_runtime_is_plausible():
    speed, why = floor.judge_runtime(0.045, 0.04)
    assert speed == pytest.approx(0.04 / 0.045) and why is None
    # the margin: flagged only below IMPLAUSIBLE_RUNTIME_FRACTION of the floor
    assert floor.judge_runtime(0.04 * config.IMPLAUSIBLE_RUNTIME_FRACTION * 1.01, 0.04)[1] is None
    assert floor.judge_runtime(0.04 * config.IMPLAUSIBLE_RUNTIME_FRACTION * 0.99, 0.04)[1] is not None
    assert floor.judge_runtime(None, 0.04) == (None, None) and floor.judge_runtime(0.04, None) == (None, None)


@pytest.fixture
def base():
    task = describe_task_file(TASKS / "1_scale_shift.py", level=1, number=1)
    candidate = Candidate(task_id=task.id, source="// k\n", language="cuda", kernel_name="k")
    return verdict.base_fields(candidate, task, "cuda")


def timed(runtime_ms: float, eager_ms: float) -> dict:
    return {"status": "correct", "flags": [], "runtime": {"median_ms": runtime_ms, "n": 50},
            "eager_window": {"median_ms": eager_ms}, "speedup_blocks": [eager_ms / runtime_ms] * 4}  # fmt: skip


def test_a_record_faster_than_its_floor_is_incorrect_with_the_evidence_kept(base):
    record = verdict.assemble_record(base, status="correct", result=timed(0.0018, 0.17), extra={"floor_ms": 0.04})
    assert record.status == "incorrect" and not record.ranking_eligible
    assert "implausible_runtime" in record.flags and "implausible_runtime" in record.error
    assert record.runtime_ms == 0.0018 and record.floor_ms == 0.04
    assert record.speed_of_light == pytest.approx(0.04 / 0.0018)


def test_a_record_within_its_floor_keeps_its_verdict_and_gets_a_speed_of_light(base):
    record = verdict.assemble_record(base, status="correct", result=timed(0.05, 0.17), extra={"floor_ms": 0.04})
    assert record.status == "correct" and "implausible_runtime" not in record.flags and record.error is None
    assert record.speed_of_light == pytest.approx(0.8)


def test_without_a_floor_there_is_no_speed_of_light_and_no_flag(base):
    record = verdict.assemble_record(base, status="correct", result=timed(0.0018, 0.0019), extra={"floor_ms": None})
    assert record.status == "correct" and record.speed_of_light is None and record.floor_ms is None


def test_the_cpu_backend_has_no_floor(monkeypatch):
    monkeypatch.setattr(floor, "device_bandwidth", lambda index: H100_SXM)
    assert floor.record_floor(manifest([MB64]), "cpu", 0) is None
    assert floor.record_floor(manifest([MB64]), "cuda", 0) == pytest.approx(MB64 / H100_SXM * 1e3)


class FakeNvml:
    """libnvidia-ml's calls the floor makes, answering for one H100 SXM at index 0."""

    def __init__(self):
        self.shut = False

    def nvmlInit_v2(self):
        return 0

    def nvmlShutdown(self):
        self.shut = True
        return 0

    def nvmlDeviceGetHandleByIndex_v2(self, index, handle):
        return 0 if index.value == 0 else 2

    def nvmlDeviceGetHandleByUUID(self, uuid, handle):
        return 0 if uuid == b"GPU-1234" else 2

    def nvmlDeviceGetMaxClockInfo(self, handle, clock_type, clock):
        clock._obj.value = 2619 if clock_type == floor.NVML_CLOCK_MEM else 1980
        return 0

    def nvmlDeviceGetMemoryBusWidth(self, handle, width):
        width._obj.value = 5120
        return 0


def test_the_bandwidth_comes_from_nvmls_memory_clock_and_bus_width(monkeypatch):
    fake = FakeNvml()
    monkeypatch.setattr(ctypes, "CDLL", lambda name: fake)
    floor.peak_dram_bandwidth.cache_clear()
    try:
        assert floor.peak_dram_bandwidth("0") == pytest.approx(H100_SXM)
        assert floor.peak_dram_bandwidth("GPU-1234") == pytest.approx(H100_SXM)
        assert floor.peak_dram_bandwidth("1") is None and fake.shut
    finally:
        floor.peak_dram_bandwidth.cache_clear()


def test_an_nvml_without_the_bus_width_call_gives_no_bandwidth(monkeypatch):
    class Older(FakeNvml):
        def __getattribute__(self, name):
            if name == "nvmlDeviceGetMemoryBusWidth":
                raise AttributeError(name)
            return super().__getattribute__(name)

    older = Older()
    monkeypatch.setattr(ctypes, "CDLL", lambda name: older)
    floor.peak_dram_bandwidth.cache_clear()
    try:
        assert floor.peak_dram_bandwidth("0") is None and older.shut
    finally:
        floor.peak_dram_bandwidth.cache_clear()


def test_without_nvml_there_is_no_bandwidth(monkeypatch):
    def missing(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", missing)
    floor.peak_dram_bandwidth.cache_clear()
    try:
        assert floor.peak_dram_bandwidth("0") is None
    finally:
        floor.peak_dram_bandwidth.cache_clear()


def test_the_clean_reference_gives_the_size_of_every_perturbation_target():
    module = load_task_module(describe_task_file(TASKS / "1_scale_shift.py"))
    job = {"backend": "cpu", "seeds": [11, 12], "trials": 2, "atol": 1e-4, "rtol": 1e-4}
    found = compute_reference(module, job).manifest
    assert found["target_bytes"] == [256 * 256 * 4, 256 * 4, 256 * 4]  # x, weight, bias
    assert floor.floor_bytes(found) == 256 * 256 * 4 * 2 + 256 * 4 * 2  # out = x * weight + bias: all of them


@pytest.mark.gpu
def test_nvmls_bandwidth_agrees_with_the_cuda_runtimes_device_properties():
    import torch

    bandwidth = floor.device_bandwidth(0)
    print(f"{torch.cuda.get_device_name(0)}: peak DRAM bandwidth {bandwidth and bandwidth / 1e12:.3f} TB/s (NVML)")
    assert bandwidth and bandwidth > 1e11
    props = torch.cuda.get_device_properties(0)
    clock_khz, width = getattr(props, "memory_clock_rate", None), getattr(props, "memory_bus_width", None)
    if not clock_khz or not width:
        pytest.skip("this torch does not expose the memory clock and bus width")
    assert bandwidth == pytest.approx(floor.dram_bandwidth(clock_khz / 1000, width), rel=0.02)
