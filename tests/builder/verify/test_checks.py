"""checks.evaluate in-process on trusted Python fakes: every flag fires when it should, and none fires
on an honest forward (a false positive is as bad as a miss).

The fakes compute through numpy so that, like a compiled kernel, their work is invisible to the torch
profiler; fakes that call torch ops stand for candidates that hand the work to ATen.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from builder.tasks import instantiate, load_task_module
from builder.tasks.suite import describe_task_file
from builder.verify.child import checks, reference
from builder.verify.protocol import plan
from tests.builder.verify import in_process

TASKS = Path(__file__).resolve().parents[2] / "fixtures" / "tasks" / "level1"
SEEDS = [9_141_592_653, 2_718_281_828, 1_618_033_988]


def task_module(name: str):
    return load_task_module(describe_task_file(TASKS / name))


@pytest.fixture(scope="module")
def scale_shift():
    return task_module("1_scale_shift.py")


@pytest.fixture(scope="module")
def near_zero():
    return task_module("3_near_zero.py")


def job(**overrides):
    base = {"backend": "cpu", "seeds": SEEDS, "trials": 3, "atol": 1e-4, "rtol": 1e-4, "profile": False}
    base.update(overrides)
    return base


def honest(x, weight, bias):
    return torch.from_numpy(x.numpy() * weight.numpy() + bias.numpy())


def evaluate(forward, module, **overrides):
    return in_process.evaluate(forward, module, job(**overrides))


def test_honest_forward_is_correct_without_flags(scale_shift):
    result = evaluate(honest, scale_shift)
    assert result["status"] == "correct", result["error"]
    assert result["flags"] == []
    assert result["trials"] == 3
    assert result["max_diff"] is not None and result["max_diff"] <= 1e-6
    assert result["own_kernel_fraction"] > 0.5


def test_wrong_output_is_incorrect_with_max_diff(scale_shift):
    def subtracts_bias(x, weight, bias):
        return torch.from_numpy(x.numpy() * weight.numpy() - bias.numpy())

    result = evaluate(subtracts_bias, scale_shift)
    assert result["status"] == "incorrect"
    assert result["max_diff"] > 0.1
    assert "outside atol" in result["error"]


def test_first_row_only_with_empty_like_is_uninitialized(scale_shift):
    def first_row_only(x, weight, bias):
        out = torch.empty_like(x)
        out.numpy()[0] = x.numpy()[0] * weight.numpy() + bias.numpy()
        return out

    result = evaluate(first_row_only, scale_shift)
    assert result["status"] == "incorrect"
    # In this long-lived pytest process glibc sometimes hands empty_like a chunk the poison did not
    # reach (garbage instead of NaN: still incorrect). The poison's exact bits are asserted below
    # (test_poison_bits_where_reference_has_a_value_are_uninitialized), in a fresh child process by
    # test_child.py and the cpu fixture in test_adversarial.py (best effort on CPU), and strictly for CUDA on
    # the GPU. No reference output of a trial is ever freed where the candidate runs, so no trial can be
    # handed its answer: the very first one fails.
    assert result["error"].startswith("trial 1:"), result["error"]


def test_the_candidates_side_runs_the_reference_only_for_the_probe_after_every_candidate_call(scale_shift,
                                                                                              monkeypatch):  # fmt: skip
    events: list[str] = []
    real_run_reference, real_run_candidate = checks.run_reference, checks.run_candidate

    def watched_reference(model, inputs, device):
        events.append("reference")
        return real_run_reference(model, inputs, device)

    def watched_candidate(*args):
        events.append("candidate")
        return real_run_candidate(*args)

    monkeypatch.setattr(checks, "run_reference", watched_reference)
    monkeypatch.setattr(checks, "run_candidate", watched_candidate)
    result = evaluate(honest, scale_shift)
    assert result["status"] == "correct", result["error"]
    # Every trial's reference came from the clean side; the one reference call here is the tampering probe.
    assert events.count("reference") == 1 and events[-1] == "reference"
    assert events.count("candidate") >= 2 * len(SEEDS)


def test_poison_bits_where_reference_has_a_value_are_uninitialized(scale_shift):
    def leaves_a_hole(x, weight, bias):
        out = honest(x, weight, bias)
        out.view(torch.int32)[7, 3] = -1  # the poison's exact bytes: what an unwritten element holds
        return out

    result = evaluate(leaves_a_hole, scale_shift)
    assert result["status"] == "incorrect"
    assert "uninitialized_output" in result["flags"]


def test_a_computed_nan_is_incorrect_but_not_called_uninitialized(scale_shift):
    def divides_zero_by_zero(x, weight, bias):
        out = honest(x, weight, bias)
        out[7, 3] = out[7, 3] * 0.0 / 0.0  # arithmetic NaN: not the poison's bit pattern
        return out

    result = evaluate(divides_zero_by_zero, scale_shift)
    assert result["status"] == "incorrect" and "NaN/Inf" in result["error"]
    assert "uninitialized_output" not in result["flags"]


def test_unwritten_output_after_poison_is_never_correct(scale_shift):
    result = evaluate(lambda x, weight, bias: torch.empty_like(x), scale_shift)
    assert result["status"] == "incorrect"  # NaN poison or stale garbage: never the right answer


def test_zeroing_the_input_after_computing_is_input_mutation(scale_shift):
    def zeroes_input(x, weight, bias):
        out = honest(x, weight, bias)
        x.numpy()[:] = 0
        return out

    result = evaluate(zeroes_input, scale_shift)
    assert result["status"] == "incorrect"
    assert "input_mutation" in result["flags"]
    assert "input 0" in result["flag_notes"]["input_mutation"]


def test_zeroing_inputs_cannot_make_the_reference_agree(scale_shift):
    def zeroes_then_returns_bias(x, weight, bias):
        x.numpy()[:] = 0
        return honest(x, weight, bias)  # equals the reference only if the reference saw zeros too

    result = evaluate(zeroes_then_returns_bias, scale_shift)
    assert result["status"] == "incorrect"
    assert "input_mutation" in result["flags"]
    assert result["max_diff"] > 0.1


def test_parameter_mutation_is_flagged(scale_shift):
    def doubles_weight(x, weight, bias):
        out = honest(x, weight, bias)
        weight.numpy()[:] *= 2
        return out

    result = evaluate(doubles_weight, scale_shift)
    assert "input_mutation" in result["flags"]
    assert "parameter weight" in result["flag_notes"]["input_mutation"]


def test_random_output_is_nondeterministic(scale_shift):
    rng = np.random.default_rng()

    def noisy(x, weight, bias):
        noise = rng.standard_normal(x.shape).astype(np.float32) * 1e-2
        return torch.from_numpy(x.numpy() * weight.numpy() + bias.numpy() + noise)

    result = evaluate(noisy, scale_shift)
    assert result["status"] == "incorrect"
    assert "nondeterministic" in result["flags"]


def test_noise_within_tolerance_is_not_nondeterministic(scale_shift):
    rng = np.random.default_rng()

    def jitter(x, weight, bias):
        noise = rng.standard_normal(x.shape).astype(np.float32) * 1e-7
        return torch.from_numpy(x.numpy() * weight.numpy() + bias.numpy() + noise)

    result = evaluate(jitter, scale_shift)
    assert result["status"] == "correct", result["error"]
    assert result["flags"] == []


def test_constant_output_ignores_input(scale_shift):
    result = evaluate(lambda x, weight, bias: torch.full_like(x, 0.5), scale_shift)
    assert result["status"] == "incorrect"
    assert "ignores_input" in result["flags"]
    assert "uses_torch_ops" not in result["flags"]  # allocation helpers are not compute


def test_ignoring_a_parameter_is_flagged(scale_shift):
    def no_bias(x, weight, bias):
        return torch.from_numpy(x.numpy() * weight.numpy())

    result = evaluate(no_bias, scale_shift)
    assert "ignores_input" in result["flags"]
    assert "bias" in result["flag_notes"]["ignores_input"]


def test_torch_ops_doing_the_work_are_flagged_but_not_disqualifying():
    matmul = task_module("2_small_matmul.py")
    result = evaluate(lambda a, b: torch.matmul(a, b), matmul, atol=1e-3, rtol=1e-3)
    assert result["status"] == "correct"
    assert result["flags"] == ["uses_torch_ops"]
    assert result["own_kernel_fraction"] < 0.5
    assert any(k["name"] == "aten::matmul" and k["library"] for k in result["kernels_seen"])


def test_own_matmul_is_not_torch_ops():
    matmul = task_module("2_small_matmul.py")
    result = evaluate(lambda a, b: torch.from_numpy(a.numpy() @ b.numpy()), matmul, atol=1e-3, rtol=1e-3)
    assert result["status"] == "correct", result["error"]
    assert result["flags"] == []


def test_exception_is_runtime_error_with_message(scale_shift):
    def raises(x, weight, bias):
        raise RuntimeError("kernel launch failed: too many resources requested")

    result = evaluate(raises, scale_shift)
    assert result["status"] == "runtime_error"
    assert "too many resources" in result["error"]
    assert result["error_origin"] == "candidate"


@pytest.mark.parametrize(
    ("forward", "message"),
    [
        (lambda x, w, b: honest(x, w, b)[:, :-1], "shape"),
        (lambda x, w, b: honest(x, w, b).double(), "dtype"),
        (lambda x, w, b: (honest(x, w, b), honest(x, w, b)), "2 tensors"),
        (lambda x, w, b: 3.0, "expected tensors"),
    ],
    ids=["shape", "dtype", "count", "not-a-tensor"],
)
def test_shape_dtype_and_type_mismatches_are_incorrect(scale_shift, forward, message):
    result = evaluate(forward, scale_shift)
    assert result["status"] == "incorrect"
    assert message in result["error"]


def test_near_zero_task_is_degenerate_and_zeros_pass_only_with_the_flag(near_zero):
    result = evaluate(lambda x: torch.zeros_like(x), near_zero)
    assert result["status"] == "correct"  # within tolerance: exactly why the flag must be there
    assert result["flags"] == ["degenerate_task"]


def test_informative_task_is_not_degenerate(scale_shift):
    assert reference.degenerate_reason(torch.randn(64, 64), 1e-4, 1e-4) is None
    broadcast_rows = torch.randn(1, 64).expand(64, 64).contiguous()
    assert "dim 0" in reference.degenerate_reason(broadcast_rows, 1e-4, 1e-4)


def test_seed_special_casing_fails_under_secret_seeds(scale_shift):
    model, inputs = instantiate(scale_shift, 42)
    memorised_x, memorised_out = inputs[0].clone(), model(*inputs).detach().clone()

    def knows_seed_42(x, weight, bias):
        if torch.equal(x, memorised_x):
            return memorised_out.clone()
        return torch.zeros_like(x)

    known_seed = evaluate(knows_seed_42, scale_shift, seeds=[42], trials=1)
    assert known_seed["max_diff"] == 0.0  # the memorised output itself matches...
    # ...but perturbing a parameter exposes it. (Its only work is torch.equal + clone, so the census may
    # also call it uses_torch_ops, depending on how those two ops time on the box.)
    assert "ignores_input" in known_seed["flags"]
    assert set(known_seed["flags"]) <= {"ignores_input", "uses_torch_ops"}
    secret = evaluate(knows_seed_42, scale_shift)
    assert secret["status"] == "incorrect" and secret["max_diff"] > 0.1


def test_trials_use_the_job_seeds(scale_shift):
    seen = []

    def records(x, weight, bias):
        seen.append(float(x[0, 0]))
        return honest(x, weight, bias)

    evaluate(records, scale_shift)
    expected = {float(instantiate(scale_shift, seed)[1][0][0, 0]) for seed in SEEDS}
    assert expected <= set(seen)


def test_more_trials_than_seeds_derives_fresh_seeds():
    seeds = plan.trial_seeds({"seeds": [5], "trials": 4})
    assert seeds[0] == 5 and len(set(seeds)) == 4
    assert plan.trial_seeds({"seeds": [5], "trials": 4}) == seeds  # reproducible from the job


def test_compare_follows_allclose_semantics_with_special_values():
    from builder.verify.protocol.compare import compare_outputs

    ref = torch.tensor([1.0, float("nan"), float("inf"), -2.0])
    assert compare_outputs(ref.clone(), ref, 1e-4, 1e-4).ok  # same NaN and same infinity are equal
    assert not compare_outputs(torch.tensor([1.0, float("nan"), -float("inf"), -2.0]), ref, 1e-4, 1e-4).ok
    close = ref + torch.tensor([1e-5, 0.0, 0.0, 0.0])
    assert compare_outputs(close, ref, 1e-4, 1e-4).ok
    hole = torch.tensor([float("nan"), float("nan"), float("inf"), -2.0])
    result = compare_outputs(hole, ref, 1e-4, 1e-4)
    assert not result.ok and not result.uninitialized and "NaN/Inf" in result.error  # a NaN, not the poison
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        typed_ref = torch.tensor([1.0, 2.0, 3.0], dtype=dtype)
        unwritten = typed_ref.clone()
        unwritten.view(torch.uint8)[: unwritten.element_size()] = 0xFF  # element 0 keeps the poison's bytes
        result = compare_outputs(unwritten, typed_ref, 1e-2, 1e-2)
        assert not result.ok and result.uninitialized, dtype
    ints = torch.tensor([1, 2, 3])
    assert compare_outputs(ints.clone(), ints, 0.0, 0.0).ok
    assert "1 of 3 values differ" in compare_outputs(torch.tensor([1, 2, 4]), ints, 0.0, 0.0).error


def test_library_kernel_names_are_classified():
    from builder.verify.child.op_census import is_library_kernel

    library = [
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, ...)",
        "ampere_sgemm_128x64_nn",
        "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32",
        "nvjet_tst_128x64_64x4_1x2_h_bz_coopA_NNT",
        "cutlass::Kernel2<cutlass_80_tensorop_s1688gemm>",
        "triton_poi_fused_add_mul_0",
        "Memcpy DtoD (Device -> Device)",
    ]
    own = ["scale_shift(float const*, float const*, float const*, float*, long, long)", "fused_kernel"]
    assert all(is_library_kernel(name) for name in library)
    assert not any(is_library_kernel(name) for name in own)


def test_rebinding_a_torch_function_the_reference_uses_is_tampering(scale_shift, monkeypatch):
    """The reference is x * weight + bias: a candidate that makes Tensor addition drop its right operand on
    its first call, then returns x * weight, agrees with the reference computed after it. Judged against the
    clean reference it is incorrect, and both the probe and the state comparison see the tampering."""
    monkeypatch.setattr(torch.Tensor, "__add__", torch.Tensor.__add__)  # restored after the test

    def drops_bias(x, weight, bias):
        torch.Tensor.__add__ = lambda self, other: self.clone()
        return torch.from_numpy(x.numpy() * weight.numpy())

    result = evaluate(drops_bias, scale_shift)
    assert result["status"] == "incorrect"
    assert "tampers_reference" in result["flags"]
    assert result["max_diff"] > 0.1  # the clean reference kept the bias
    assert (
        "torch.Tensor.__add__" in result["flag_notes"]["tampers_reference"]
        or "clean" in result["flag_notes"]["tampers_reference"]
    )


def test_changing_the_tasks_default_fn_is_tampering(scale_shift, monkeypatch):
    monkeypatch.setattr(scale_shift.Model.forward, "__defaults__", scale_shift.Model.forward.__defaults__)

    def swaps_module_fn(x, weight, bias):
        scale_shift.Model.forward.__defaults__ = (lambda x, w, b: x * w,)
        return honest(x, weight, bias)

    result = evaluate(swaps_module_fn, scale_shift)
    assert result["status"] == "incorrect"
    assert "tampers_reference" in result["flags"]


def test_a_global_numeric_setting_is_tampering(scale_shift):
    before = torch.get_default_dtype()

    def switches_default_dtype(x, weight, bias):
        torch.set_default_dtype(torch.float64)
        return honest(x, weight, bias)

    try:
        result = evaluate(switches_default_dtype, scale_shift)
    finally:
        torch.set_default_dtype(before)
    assert "tampers_reference" in result["flags"]
    assert "default_dtype" in result["flag_notes"]["tampers_reference"]


def test_the_reference_is_computed_without_tf32_or_reduced_precision_and_the_defaults_come_back():
    # cuDNN's TF32 default made a float32 convolution's reference itself ~1e-3 off: exact kernels then
    # failed atol=rtol=1e-3 for some seeds. Every reference call runs with those switches off.
    seen = []

    class Spy(torch.nn.Module):
        def forward(self, x):
            matmul = torch.backends.cuda.matmul
            seen.append((torch.backends.cudnn.allow_tf32, matmul.allow_tf32,
                         matmul.allow_fp16_reduced_precision_reduction, matmul.allow_bf16_reduced_precision_reduction))  # fmt: skip
            return x * 2

    before = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = True
    try:
        out = reference.run_reference(Spy(), [torch.ones(3)], "cpu")
        assert torch.backends.cudnn.allow_tf32 is True
        with pytest.raises(reference.ReferenceFailure):
            reference.run_reference(lambda x: 1 / 0, [torch.ones(3)], "cpu")
        assert torch.backends.cudnn.allow_tf32 is True  # put back after a failing reference too
    finally:
        torch.backends.cudnn.allow_tf32 = before
    assert seen == [(False, False, False, False)]
    assert torch.equal(out, torch.full((3,), 2.0))


def test_tamper_fingerprint_sees_no_change_from_the_checks_own_work(scale_shift):
    from builder.verify.child import tamper

    before = tamper.fingerprint(scale_shift)
    assert evaluate(honest, scale_shift)["status"] == "correct"
    assert tamper.changes(before, tamper.fingerprint(scale_shift)) == []


def test_the_side_stream_clock_half_weighs_the_device_s_work_past_the_calling_stream():
    from builder.verify.child.side_stream import clock_gap_reason

    idle = [0.027] * 7
    # nothing past the calling stream's work: the clocks' own noise, or other tenants in some calls
    assert clock_gap_reason([0.003, 0.01, 0.004, 0.002, 0.006, 0.001, 0.005], idle) is None
    assert clock_gap_reason([0.09, 0.08, 0.1, 0.07, 0.09, 0.11, 0.06], idle) is None
    assert clock_gap_reason([0.4, 0.3, 0.01, 0.3, 0.25, 0.3, 0.3], idle) is None
    # 0.25 ms still running on a stream nobody waits for once the calling stream is done, in every call
    reason = clock_gap_reason([0.27, 0.26, 0.25, 0.28, 0.26, 0.27, 0.26], idle)
    assert reason is not None and "at least 0.250 ms after the calling stream" in reason


def test_the_side_stream_clock_check_waits_for_its_turn_and_runs_once(monkeypatch):
    """The clock half of the side-stream check is kept for the moment the device is the candidate's alone (the
    child calls time_side_stream after the timing grant); it flags what it finds, then lets go of the probe."""
    from builder.verify.child import side_stream

    calls = []

    def fake_reason(bound, pristine):
        calls.append((bound, pristine))
        return "the device worked 0.8 ms after the calling stream's work was done (a device-synchronized host clock)"

    monkeypatch.setattr(side_stream, "side_stream_timing_reason", fake_reason)
    run = checks.CandidateRun()
    run.time_side_stream()  # nothing kept (a CPU run, or the checks never reached it): nothing to do
    assert calls == [] and "side_stream" not in run.flags
    run.side_stream_probe = ("bound", ["inputs"])
    assert run.result()["flags"] == []  # not judged before its turn
    run.time_side_stream()
    run.time_side_stream()
    assert calls == [("bound", ["inputs"])] and run.result()["flags"] == ["side_stream"]
    assert "host clock" in run.result()["flag_notes"]["side_stream"] and run.side_stream_probe is None


def test_check_steps_keep_each_kind_of_steps_time_without_the_time_yielded_to_a_window():
    import time

    from builder.verify.child.checks import CheckSteps

    steps = CheckSteps(lambda: time.sleep(0.2), first="call")  # each yield: a window held the device 0.2 s
    time.sleep(0.02)
    steps("repeat")
    steps("call")
    time.sleep(0.02)
    steps.stop()
    assert set(steps.seconds) == {"check.call", "cpu.check.call", "rq.check.call", "check.repeat", "cpu.check.repeat",
                                  "rq.check.repeat"}  # fmt: skip
    assert 0.04 <= steps.seconds["check.call"] < 0.2  # both calls' time, neither yield
    assert steps.seconds["check.repeat"] < 0.2
    assert 0.0 <= steps.seconds["rq.check.call"] <= steps.seconds["check.call"]


def test_the_run_queue_wait_counts_the_time_a_thread_waited_for_a_busy_core():
    import os
    import subprocess
    import sys
    import time

    from builder.verify.child.checks import run_queue_s

    if not os.path.exists("/proc/thread-self/schedstat"):
        pytest.skip("this kernel keeps no schedstat")
    core = min(os.sched_getaffinity(0))
    spin = (
        f"import os, time; os.sched_setaffinity(0, {{{core}}}); end = time.time() + 1.5\nwhile time.time() < end: pass"
    )
    hog = subprocess.Popen([sys.executable, "-c", spin])
    mine = os.sched_getaffinity(0)
    try:
        time.sleep(0.3)  # the hog holds the core now
        os.sched_setaffinity(0, {core})
        before, end = run_queue_s(), time.time() + 0.6
        while time.time() < end:  # runnable all along, sharing one core with the hog: about half of it waiting
            pass
        waited = run_queue_s() - before
    finally:
        os.sched_setaffinity(0, mine)
        hog.wait()
    assert 0.1 < waited < 0.6
