"""builder.verify.protocol.compare: the chunked pass the judge takes on the CPU gives the whole-tensor pass's verdicts,
figures and messages, for passing and failing outputs alike."""

from __future__ import annotations

import pytest
import torch

from builder.verify.protocol import compare


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(compare.config, "COMPARE_CHUNK_ELEMENTS", 1000)


def both_ways(cand, ref, monkeypatch, atol=1e-3, rtol=1e-3):
    chunked = compare.compare_outputs(cand, ref, atol, rtol)
    monkeypatch.setattr(compare.config, "COMPARE_CHUNK_ELEMENTS", 1 << 40)  # one whole-tensor pass
    whole = compare.compare_outputs(cand, ref, atol, rtol)
    monkeypatch.setattr(compare.config, "COMPARE_CHUNK_ELEMENTS", 1000)
    return chunked, whole


def perturbed(name: str) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    ref = torch.randn(10_007, generator=generator)
    cand = ref + 1e-5 * torch.randn(10_007, generator=generator)
    if name == "one value out":
        cand[9_999] += 1.0
    elif name == "NaN in the candidate":
        cand[5] = float("nan")
    elif name == "poison":
        cand.view(torch.int32)[8_000:8_010] = -1  # every byte 0xFF: the poison
    elif name == "reference infinity matched":
        ref[17] = cand[17] = float("inf")
    elif name == "reference infinity missed":
        ref[17] = float("inf")
    elif name == "NaN where the reference has NaN":
        ref[3] = cand[3] = float("nan")
    elif name == "every value wrong, some never written":
        cand = -ref
        cand.view(torch.int32)[2_000:2_500] = -1
        cand[9_000] = float("inf")
    return cand, ref


@pytest.mark.parametrize("case", ["within", "one value out", "NaN in the candidate", "poison",
                                  "reference infinity matched", "reference infinity missed",
                                  "NaN where the reference has NaN", "every value wrong, some never written"])  # fmt: skip
def test_chunked_and_whole_passes_agree(small_chunks, monkeypatch, case):
    cand, ref = perturbed(case)
    assert compare._compare_in_chunks("output 0", cand, ref, 1e-3, 1e-3) is not None  # failures are chunked too
    chunked, whole = both_ways(cand, ref, monkeypatch)
    assert (chunked.ok, chunked.error, chunked.uninitialized) == (whole.ok, whole.error, whole.uninitialized)
    assert chunked.ok == (case in ("within", "reference infinity matched", "NaN where the reference has NaN"))
    if chunked.max_diff is not None or whole.max_diff is not None:
        assert chunked.max_diff == pytest.approx(whole.max_diff, rel=1e-6)
        assert chunked.mean_diff == pytest.approx(whole.mean_diff, rel=1e-4)


@pytest.mark.parametrize("case", ["within", "one value out", "NaN in the candidate", "poison",
                                  "reference infinity matched", "reference infinity missed",
                                  "NaN where the reference has NaN", "every value wrong, some never written"])  # fmt: skip
def test_asked_only_whether_they_agree_a_chunked_pass_stops_at_the_first_chunk_that_disagrees(small_chunks, case):
    cand, ref = perturbed(case)
    first_only = compare.compare_outputs(cand, ref, 1e-3, 1e-3, first_only=True)
    assert first_only.ok == compare.compare_outputs(cand, ref, 1e-3, 1e-3).ok
    if case == "every value wrong, some never written":
        assert "the first 1000 of 10007 values compared" in first_only.error  # its first chunk of 1,000


def test_half_precision_outputs_are_compared_in_fp32_chunk_by_chunk(small_chunks, monkeypatch):
    ref = torch.randn(5_000, generator=torch.Generator().manual_seed(1)).half()
    cand = ref.clone()
    cand[4_321] += 0.5
    cand.view(torch.int16)[100:110] = -1  # the poison in fp16
    chunked, whole = both_ways(cand, ref, monkeypatch)
    assert not chunked.ok and chunked.error == whole.error and chunked.uninitialized and whole.uninitialized
    assert both_ways(ref.clone(), ref, monkeypatch)[0].ok


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
def test_bfloat16_and_double_outputs_take_the_chunked_pass_with_the_same_verdicts(small_chunks, monkeypatch, dtype):
    ref = (torch.randn(5_000, generator=torch.Generator().manual_seed(2)) * 100).to(dtype)
    assert compare._as_numpy(ref) is not None  # the chunked pass reads it (bfloat16 widened bit for bit)
    widened = torch.from_numpy(compare._widened(compare._as_numpy(ref)).copy())
    assert torch.equal(widened, ref.float() if dtype == torch.bfloat16 else ref)
    close = ref.clone()
    far = ref.clone()
    far[1_234] += 50.0
    for cand in (close, far):
        chunked, whole = both_ways(cand, ref, monkeypatch, atol=1e-2, rtol=1e-2)
        assert (chunked.ok, chunked.error) == (whole.ok, whole.error)
        assert chunked.max_diff == pytest.approx(whole.max_diff, rel=1e-6)
    assert both_ways(close, ref, monkeypatch)[0].ok and not both_ways(far, ref, monkeypatch)[0].ok


def same_bits_both_ways(a, b, monkeypatch) -> tuple[bool, bool]:
    chunked = compare.same_bits(a, b)
    monkeypatch.setattr(compare.config, "COMPARE_CHUNK_ELEMENTS", 1 << 40)  # torch's whole-tensor pass
    whole = compare.same_bits(a, b)
    monkeypatch.setattr(compare.config, "COMPARE_CHUNK_ELEMENTS", 1000)
    return chunked, whole


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_same_bits_in_chunks_is_torchs_equality_with_nan_equal_to_nan(small_chunks, monkeypatch, dtype):
    a = torch.randn(10_007, generator=torch.Generator().manual_seed(4)).to(dtype)
    a[5], a[9_000], a[10_006] = float("nan"), float("inf"), 0.0
    assert compare._same_in_chunks(compare._as_numpy(a), compare._as_numpy(a.clone())) is not None  # chunked
    cases = {"a copy": (a.clone(), True), "-0.0 for 0.0": (a.clone(), True), "another NaN's bits": (a.clone(), True),
             "one value in the last chunk": (a.clone(), False), "NaN where a has a value": (a.clone(), False),
             "a value where a has NaN": (a.clone(), False)}  # fmt: skip
    cases["-0.0 for 0.0"][0][10_006] = -0.0
    bits = cases["another NaN's bits"][0].view(torch.int16 if a.element_size() == 2 else torch.int32)
    if a.element_size() in (2, 4):
        bits[5] = bits[5] ^ 1  # still NaN: a payload bit (the exponent's all ones stay)
    cases["one value in the last chunk"][0][10_001] += 1.0
    cases["NaN where a has a value"][0][7] = float("nan")
    cases["a value where a has NaN"][0][5] = 1.0
    for name, (b, same) in cases.items():
        assert same_bits_both_ways(a, b, monkeypatch) == (same, same), name


def test_same_bits_of_other_dtypes_and_devices_keeps_torchs_pass(small_chunks):
    a = torch.arange(5_000)
    assert compare._as_numpy(a) is None and compare.same_bits(a, a.clone())
    assert not compare.same_bits(a, a + (torch.arange(5_000) == 4_999))
    assert not compare.same_bits(a.float(), a.double())  # dtypes differ: never the same bits
