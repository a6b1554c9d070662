"""Hardened correctness checks of one candidate (untrusted child side).

`evaluate(forward, task_module, job)` runs every check on a callable `forward` (a compiled extension's
function, a trusted Python fake in tests) or on a `CandidateBinding` (a KernelBench `ModelNew`):

- trials with fresh inputs from the job's (secret) seeds, alternating candidate-before-reference and
  reference-before-candidate, with the allocator's free memory NaN-poisoned before every candidate call;
- shapes, dtypes, NaN/Inf, max_diff and mean_diff under torch.allclose semantics;
- inputs and parameters cloned before the candidate call and compared after (input_mutation); the
  reference always runs on its own pristine copies, so a mutation cannot make it agree;
- a second call on the same inputs (nondeterministic), NaN where the reference has none
  (uninitialized_output), a near-constant reference (degenerate_task), perturbation of each input and
  parameter (ignores_input), library kernels doing the work (uses_torch_ops) and, on CUDA, work left
  running on another stream (side_stream).
"""

from __future__ import annotations

import copy
import hashlib
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from builder import config
from builder.tasks import instantiate
from builder.verify import op_census
from builder.verify.compare import (
    changed_positions,
    compare_outputs,
    flatten_outputs,
    output_nbytes,
    snapshot,
    sync,
)
from builder.verify.poison import poison_free_memory
from schemas import disqualifying_flags

MESSAGE_CHARS = 2000  # one exception message kept in a result (the parent bounds the whole error again)


class CandidateFailure(Exception):
    """The candidate raised (or a CUDA error surfaced right after it ran)."""


class ReferenceFailure(Exception):
    """The task's reference code raised: not the candidate's fault."""


def exception_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 6] + " [...]"


@dataclass
class BoundCandidate:
    """The candidate ready to run on one trial: call(*inputs) and the tensors it holds as state."""

    call: Callable[..., Any]
    state: dict[str, Any] = field(default_factory=dict)  # name -> parameter/buffer tensor


def named_state(model: Any) -> dict[str, Any]:
    state = dict(model.named_parameters())
    state.update(dict(model.named_buffers()))
    return state


class CandidateBinding:
    """How a candidate is attached to the model of one trial."""

    def bind(self, reference_model: Any, task_module: Any, seed: int, device: str) -> BoundCandidate:
        raise NotImplementedError


class FunctionalBinding(CandidateBinding):
    """`model(*inputs, fn=forward)` on a private copy of the reference model (same parameter values)."""

    def __init__(self, forward: Callable[..., Any]):
        self.forward = forward

    def bind(self, reference_model: Any, task_module: Any, seed: int, device: str) -> BoundCandidate:
        model = copy.deepcopy(reference_model)
        forward = self.forward
        return BoundCandidate(call=lambda *inputs: model(*inputs, fn=forward), state=named_state(model))


class ModelNewBinding(CandidateBinding):
    """A KernelBench `ModelNew`, built under the trial's seed exactly as the task's Model is."""

    def __init__(self, model_class: type):
        self.model_class = model_class

    def bind(self, reference_model: Any, task_module: Any, seed: int, device: str) -> BoundCandidate:
        import torch

        torch.manual_seed(seed)
        try:
            model = self.model_class(*task_module.get_init_inputs()).to(device).eval()
        except Exception as exc:  # noqa: BLE001 - untrusted constructor
            raise CandidateFailure(f"ModelNew() failed: {exception_text(exc)}") from None
        return BoundCandidate(call=model, state=named_state(model))


def trial_seeds(job: dict[str, Any]) -> list[int]:
    """The job's seeds, extended by hashing when more trials than seeds are asked for."""
    seeds = [int(s) for s in job.get("seeds") or []]
    if not seeds:  # the parent always sends secret seeds; never fall back to a fixed one
        seeds = [secrets.randbits(config.SEED_BITS)]
    trials = max(int(job.get("trials") or config.DEFAULT_TRIALS), len(seeds), 1)
    while len(seeds) < trials:
        digest = hashlib.sha256(f"{seeds[0]}:{len(seeds)}".encode()).digest()
        seeds.append(int.from_bytes(digest[:8], "big") >> 1)
    return seeds


def run_reference(model: Any, inputs: list[Any], device: str) -> Any:
    try:
        out = model(*inputs)
        sync(device)
    except Exception as exc:  # noqa: BLE001 - task code
        raise ReferenceFailure(f"reference failed: {exception_text(exc)}") from None
    return out


def run_candidate(bound: BoundCandidate, inputs: list[Any], device: str, output_bytes: list[int]) -> Any:
    """Poison the free memory, call the candidate, wait for the device (errors surface here)."""
    poison_free_memory(device, output_bytes)
    try:
        out = bound.call(*inputs)
        sync(device)
    except Exception as exc:  # noqa: BLE001 - untrusted code
        raise CandidateFailure(exception_text(exc)) from None
    return out


def restore_state(state: dict[str, Any], pristine: dict[str, Any]) -> None:
    for name, tensor in state.items():
        tensor.data.copy_(pristine[name])


def degenerate_reason(reference: Any, atol: float, rtol: float) -> str | None:
    """Why a pass on this reference output would prove little, or None."""
    import torch

    for index, tensor in enumerate(flatten_outputs(reference) or []):
        if not tensor.is_floating_point() or tensor.numel() <= 1:
            continue
        x = tensor.detach().double()
        x = x[x.isfinite()] if not bool(x.isfinite().all()) else x
        if x.numel() <= 1:
            continue
        std = float(x.std())
        if std < config.DEGENERATE_STD:
            return f"output {index} is near-constant (std {std:.3g})"
        if torch.allclose(x, torch.full_like(x, float(x.mean())), atol=atol, rtol=rtol):
            return f"output {index} is within tolerance of a constant (std {std:.3g}, atol {atol:g})"
        full = tensor.detach().double()
        if full.dim() < 2 or not bool(full.isfinite().all()):
            continue
        for dim in range(full.dim()):
            if full.shape[dim] < 2:
                continue
            flat_share = float((full.std(dim=dim) < config.DEGENERATE_STD).double().mean())
            if flat_share >= config.DEGENERATE_AXIS_FRACTION:
                return f"output {index} is near-constant along dim {dim} ({flat_share:.0%} of slices)"
    return None


def _perturbation(tensor: Any, generator: Any) -> Any:
    import torch

    noise = torch.randn(tuple(tensor.shape), generator=generator, dtype=torch.float32)
    scale = float(tensor.detach().abs().double().mean()) if tensor.numel() else 0.0
    scale = config.PERTURB_SCALE * (scale if scale > 0 else 1.0)
    return (noise * scale).to(device=tensor.device, dtype=tensor.dtype)


def ignores_input_reason(
    binding: CandidateBinding,
    task_module: Any,
    seed: int,
    device: str,
    reference_model: Any,
    pristine_inputs: list[Any],
    reference_out: Any,
    candidate_out: Any,
    tolerance: tuple[float, float],
) -> str | None:
    """Perturb each float input and parameter in turn: reference moves but the candidate does not?"""
    import torch

    atol, rtol = tolerance
    generator = torch.Generator().manual_seed(seed % (1 << 63))
    out_bytes = output_nbytes(reference_out)
    targets = [("input", i) for i, v in enumerate(pristine_inputs) if torch.is_tensor(v) and v.is_floating_point()]
    targets += [("parameter", n) for n, t in named_state(reference_model).items() if t.is_floating_point()]
    for kind, key in targets:
        ref_model = copy.deepcopy(reference_model)
        bound = binding.bind(ref_model, task_module, seed, device)
        ref_inputs, cand_inputs = snapshot(pristine_inputs), snapshot(pristine_inputs)
        if kind == "input":
            delta = _perturbation(ref_inputs[key], generator)
            ref_inputs[key] += delta
            cand_inputs[key] += delta
        else:
            if key not in bound.state:  # a ModelNew without this parameter: cannot perturb it alike
                continue
            delta = _perturbation(named_state(ref_model)[key], generator)
            named_state(ref_model)[key].data += delta
            bound.state[key].data += delta
        perturbed_ref = run_reference(ref_model, ref_inputs, device)
        if compare_outputs(perturbed_ref, reference_out, atol, rtol).ok:
            continue  # the reference does not respond to this one: it says nothing
        perturbed_out = run_candidate(bound, cand_inputs, device, out_bytes)
        unchanged = compare_outputs(perturbed_out, candidate_out, atol, rtol).ok
        if unchanged and not compare_outputs(perturbed_out, perturbed_ref, atol, rtol).ok:
            return f"output did not change when {kind} {key} was perturbed (the reference did)"
    return None


def _shapes_match(candidate_out: Any, reference_out: Any) -> bool:
    cand, ref = flatten_outputs(candidate_out), flatten_outputs(reference_out)
    if cand is None or ref is None or len(cand) != len(ref):
        return False
    return all(
        c.shape == r.shape and c.dtype == r.dtype and c.device == r.device for c, r in zip(cand, ref, strict=True)
    )


def _op_census(bound: BoundCandidate, pristine: list[Any], device: str, job: dict[str, Any]) -> dict[str, Any]:
    inputs = snapshot(pristine)
    try:
        summary = op_census.census(lambda: bound.call(*inputs), device)
    except CandidateFailure:
        raise
    except Exception as exc:  # noqa: BLE001 - a profiler failure must not fail the candidate
        summary = {"error": f"profiler failed: {exception_text(exc)}", "uses_torch_ops": False}
    if job.get("profile"):
        summary["torch_profile"] = _torch_profile(bound, pristine, device, summary)
    return summary


def _torch_profile(bound: BoundCandidate, pristine: list[Any], device: str, census: dict[str, Any]) -> dict:
    try:  # written by the profiling engineer; optional here
        from builder.profile.torch_profile import profile_call
    except ImportError:
        return {k: v for k, v in census.items() if k != "torch_profile"}
    inputs = snapshot(pristine)
    try:
        return profile_call(lambda: bound.call(*inputs), device)
    except Exception as exc:  # noqa: BLE001
        return {"error": f"torch profile failed: {exception_text(exc)}"}


class _Verdict:
    def __init__(self) -> None:
        self.flags: set[str] = set()
        self.errors: list[str] = []
        self.notes: dict[str, str] = {}
        self.max_diff: float | None = None
        self.mean_diffs: list[float] = []
        self.trials = 0
        self.census: dict[str, Any] = {}

    def flag(self, name: str, why: str) -> None:
        self.flags.add(name)
        self.notes.setdefault(name, why)

    def fail(self, why: str) -> None:
        self.errors.append(why)

    def result(self) -> dict[str, Any]:
        disqualified = sorted(self.flags & disqualifying_flags())
        status = "incorrect" if self.errors or disqualified else "correct"
        error_lines = self.errors[:1] + [f"{name}: {self.notes[name]}" for name in disqualified]
        return {
            "status": status,
            "flags": sorted(self.flags),
            "error": "; ".join(error_lines) or None,
            "flag_notes": dict(sorted(self.notes.items())),
            "max_diff": self.max_diff,
            "mean_diff": sum(self.mean_diffs) / len(self.mean_diffs) if self.mean_diffs else None,
            "trials": self.trials,
            "own_kernel_fraction": self.census.get("own_kernel_fraction"),
            "kernels_seen": self.census.get("kernels_seen", []),
            "op_census": {k: v for k, v in self.census.items() if k not in ("kernels_seen", "torch_profile")},
            "torch_profile": self.census.get("torch_profile"),
        }


def evaluate(forward: Any, task_module: Any, job: dict[str, Any]) -> dict[str, Any]:
    """Run every correctness check; returns the result fields (status, flags, error, diffs, ...).

    A candidate exception or CUDA error gives status runtime_error; a failing reference too, with
    `error_origin: "task"` so that the parent does not blame the candidate.
    """
    import torch

    binding = forward if isinstance(forward, CandidateBinding) else FunctionalBinding(forward)
    device = "cuda" if job.get("backend") == "cuda" else "cpu"
    verdict = _Verdict()
    try:
        with torch.no_grad():
            _run_trials(binding, task_module, job, device, verdict)
    except CandidateFailure as exc:
        result = verdict.result()
        result.update(status="runtime_error", error=str(exc), error_origin="candidate")
        return result
    except ReferenceFailure as exc:
        result = verdict.result()
        result.update(status="runtime_error", error=str(exc), error_origin="task")
        return result
    return verdict.result()


def _run_trials(binding: CandidateBinding, task_module: Any, job: dict, device: str, verdict: _Verdict) -> None:
    tolerance = (float(job["atol"]), float(job["rtol"]))
    for index, seed in enumerate(trial_seeds(job)):
        reference_model, inputs = instantiate(task_module, seed, device)
        pristine = snapshot(inputs)
        bound = binding.bind(reference_model, task_module, seed, device)
        pristine_state = snapshot(list(bound.state.values()))
        if index == 0:  # output sizes for the poison, from a reference call on private copies
            probe = run_reference(copy.deepcopy(reference_model), snapshot(pristine), device)
            out_bytes = output_nbytes(probe)
        candidate_inputs = snapshot(pristine)
        candidate_first = index % 2 == 0
        if not candidate_first:
            reference_out = run_reference(reference_model, inputs, device)
        candidate_out = run_candidate(bound, candidate_inputs, device, out_bytes)
        # The probe holds this trial's exact answer: freed before the candidate ran, its buffer could be the one
        # the candidate's empty_like is handed (a first-row-only kernel then passes the trial).
        probe = None
        if candidate_first:
            reference_out = run_reference(reference_model, inputs, device)
        verdict.trials += 1
        mutated = [f"input {i}" for i in changed_positions(candidate_inputs, pristine)]
        names = list(bound.state)
        mutated += [f"parameter {names[i]}" for i in changed_positions(list(bound.state.values()), pristine_state)]
        if mutated:
            verdict.flag("input_mutation", f"the candidate changed {', '.join(mutated[:4])}")
        comparison = compare_outputs(candidate_out, reference_out, *tolerance)
        if comparison.max_diff is not None:
            verdict.max_diff = max(verdict.max_diff or 0.0, comparison.max_diff)
        if comparison.mean_diff is not None:
            verdict.mean_diffs.append(comparison.mean_diff)
        if comparison.uninitialized:
            verdict.flag(
                "uninitialized_output", "the poison (all-ones NaN) in the output where the reference has a value"
            )
        if not comparison.ok:
            verdict.fail(f"trial {index + 1}: {comparison.error}")
        if _shapes_match(candidate_out, reference_out):
            restore_state(bound.state, dict(zip(names, pristine_state, strict=True)))
            again = run_candidate(bound, snapshot(pristine), device, out_bytes)
            repeat = compare_outputs(again, candidate_out, *tolerance)
            # Poison showing through differs call to call; uninitialized_output already names the cause.
            if not repeat.ok and not comparison.uninitialized:
                verdict.flag("nondeterministic", f"two calls on the same inputs disagreed ({repeat.error})")
        if index == 0:
            _first_trial_extras(binding, task_module, job, device, verdict, seed, reference_model, pristine)
            reason = degenerate_reason(reference_out, *tolerance)
            if reason:
                verdict.flag("degenerate_task", reason)
            if _shapes_match(candidate_out, reference_out):
                reason = ignores_input_reason(
                    binding, task_module, seed, device, reference_model, pristine, reference_out,
                    candidate_out, tolerance,
                )  # fmt: skip
                if reason:
                    verdict.flag("ignores_input", reason)
        if verdict.errors:  # further trials cannot turn a wrong output right
            break


def _first_trial_extras(
    binding: CandidateBinding,
    task_module: Any,
    job: dict,
    device: str,
    verdict: _Verdict,
    seed: int,
    reference_model: Any,
    pristine: list[Any],
) -> None:
    """Checks that need one call each: torch-op census and, on CUDA, the side-stream probes."""
    bound = binding.bind(copy.deepcopy(reference_model), task_module, seed, device)
    verdict.census = _op_census(bound, pristine, device, job)
    if verdict.census.get("uses_torch_ops"):
        share = verdict.census.get("library_fraction") or 0.0
        verdict.flag("uses_torch_ops", f"{share:.0%} of the call's time in PyTorch/library kernels")
    if device == "cuda":
        from builder.verify.timing import side_stream_reason

        reason = side_stream_reason(bound, pristine)
        if reason:
            verdict.flag("side_stream", reason)
