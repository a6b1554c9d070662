"""torch.profiler summaries: real CPU profiles, and the CUDA own-vs-library split on recorded events."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from builder import config
from builder.profile.kernel_names import is_library_kernel, is_library_op
from builder.profile.torch_profile import profile_call, summarise


def test_cpu_call_gives_operators_with_counts_and_memory():
    a, b = torch.randn(128, 128), torch.randn(128, 128)

    def call():
        out = a @ b
        for _ in range(3):
            out = out + 1.0
        return torch.relu(out)

    result = profile_call(call, "cpu")
    assert "error" not in result
    assert result["activities"] == ["CPU"]
    by_name = {row["name"]: row for row in result["operators"]}
    assert by_name["aten::add"]["count"] == 3
    assert by_name["aten::relu"]["count"] == 1
    assert "aten::mm" in by_name
    assert by_name["aten::mm"]["cpu_memory_bytes"] == 128 * 128 * 4  # the product's allocation
    assert all(row["name"] != config.NVTX_CANDIDATE_RANGE for row in result["operators"])
    assert result["kernels"] == [] and result["own_fraction_basis"] == "cpu_time"
    assert 0.0 <= result["own_fraction"] < 1.0
    assert len(result["operators"]) <= config.TORCH_PROFILE_TOP


def test_cpu_own_fraction_separates_own_work_from_aten_work():
    big = torch.randn(512, 512)

    def own_work():  # pure Python stands in for a candidate's own CPU code: no ATen op inside
        return sum(i * i for i in range(300_000))

    def aten_work():
        for _ in range(4):
            big @ big

    own = profile_call(own_work, "cpu")["own_fraction"]
    library = profile_call(aten_work, "cpu")["own_fraction"]
    assert own > 0.9
    assert library < 0.5


def test_candidate_errors_propagate():
    def broken():
        raise RuntimeError("candidate failed")

    with pytest.raises(RuntimeError, match="candidate failed"):
        profile_call(broken, "cpu")


@dataclass
class RecordedEvent:
    """The attributes of torch's FunctionEventAvg that summarise() reads."""

    key: str
    count: int
    device_type: str = "DeviceType.CPU"
    self_cpu_time_total: float = 0.0
    cpu_time_total: float = 0.0
    self_device_time_total: float = 0.0
    device_time_total: float = 0.0
    self_cpu_memory_usage: int = 0
    self_device_memory_usage: int = 0


def test_cuda_own_fraction_is_device_time_of_own_kernels():
    events = [
        RecordedEvent(config.NVTX_CANDIDATE_RANGE, 1, self_cpu_time_total=50.0, cpu_time_total=400.0),
        RecordedEvent("aten::empty", 1, self_cpu_time_total=20.0, cpu_time_total=20.0),
        RecordedEvent("aten::mm", 1, self_cpu_time_total=30.0, cpu_time_total=30.0, self_device_time_total=25.0),
        RecordedEvent("add_relu_kernel(float const*, float*, int)", 2, "DeviceType.CUDA", self_device_time_total=75.0),
        RecordedEvent(
            "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32",
            1,
            "DeviceType.CUDA",
            self_device_time_total=25.0,
        ),  # fmt: skip
    ]
    summary = summarise(events, "cuda:0")
    assert summary["own_fraction"] == pytest.approx(0.75)
    assert summary["own_fraction_basis"] == "device_time"
    assert [k["name"][:8] for k in summary["kernels"]] == ["add_relu", "sm90_xmm"]
    assert [k["library"] for k in summary["kernels"]] == [False, True]
    assert summary["totals"]["device_us"] == pytest.approx(100.0)
    assert [row["name"] for row in summary["operators_by_device"]] == ["aten::mm"]
    assert [row["name"] for row in summary["operators"]] == ["aten::mm", "aten::empty"]


def test_cuda_without_kernels_has_no_fraction():
    summary = summarise([RecordedEvent("aten::add", 1, self_cpu_time_total=5.0)], "cuda")
    assert summary["own_fraction"] is None and summary["own_fraction_basis"] is None


@pytest.mark.parametrize(
    "name",
    [
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, T2, T3)",
        "void at::native::(anonymous namespace)::reduce_kernel<512, 1>(T1)",
        "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1",
        "ampere_sgemm_128x64_nn",
        "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm>(Params)",
        "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNN",
        "void cub::DeviceReduceKernel<Policy, float*>(float*)",
        "Memcpy HtoD (Pageable -> Device)",
        "Memset (Device)",
        "triton_poi_fused_add_relu_0",
        "cudnn::engines_precompiled::nchwToNhwcKernel",
    ],
)
def test_library_kernels(name):
    assert is_library_kernel(name)


@pytest.mark.parametrize(
    "name",
    [
        "add_relu_kernel(const float *, const float *, float *, int)",
        "void matmul_tiled<32>(float const*, float const*, float*, int)",
        "memcpy_kernel(float*, float const*, int)",  # a candidate's own kernel may be named like a copy
        "gemm_bias_relu_kernel(float const*, float const*, float*, int)",  # GEMM tasks' own kernels
        "void sgemm_tiled<64>(float const*, float const*, float*, int)",
        "(anonymous namespace)::fused_softmax(float*, int)",
        "",
    ],
)
def test_own_kernels(name):
    assert not is_library_kernel(name)


def test_library_ops():
    assert is_library_op("aten::mm") and not is_library_op("candidate")
