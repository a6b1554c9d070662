"""Hardened correctness checks of one candidate: the candidate's side (untrusted child).

The candidate's child never computes a reference output that a verdict rests on: the clean reference child
(`reference.py`) computed them before any candidate code ran, and the trusted parent compares (`judge/outputs.py`).
This side runs the candidate and keeps what it returned:

- trials with fresh inputs from the job's (secret) seeds, the allocator's free memory NaN-poisoned before
  every candidate call (the reference's output sizes come from the manifest, not from a reference call);
- inputs and parameters cloned before each call and compared after (input_mutation);
- a second call on the same inputs (nondeterministic);
- the candidate under each perturbation target the reference responds to (the judge decides ignores_input);
- library kernels doing the work (uses_torch_ops) and, on CUDA, work left on another stream (side_stream);
- the task's own reference on the probe seed, computed here after the candidate has loaded and run: the judge
  compares it bit for bit with the clean one (tampers_reference, with `tamper.py`'s state comparison).

`evaluate(forward, task_module, job)` runs both sides in one process (the clean reference first): for trusted
Python fakes in tests, never for candidate code.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from builder.tasks import instantiate
from builder.verify.child import op_census
from builder.verify.child.failures import CandidateFailure, exception_text
from builder.verify.child.poison import poison_free_memory
from builder.verify.child.precision import named_state
from builder.verify.child.reference import ReferenceFailure, perturbation, perturbation_targets, run_reference
from builder.verify.child.timing import plain_output_reason
from builder.verify.protocol.compare import (
    changed_positions,
    compare_outputs,
    flatten_outputs,
    holds_poison,
    snapshot,
    sync,
)
from builder.verify.protocol.plan import trial_seeds


@dataclass
class BoundCandidate:
    """The candidate ready to run on one trial: call(*inputs) and the tensors it holds as state."""

    call: Callable[..., Any]
    state: dict[str, Any] = field(default_factory=dict)  # name -> parameter/buffer tensor


class CandidateBinding:
    """How a candidate is attached to the model of one trial."""

    def bind(self, reference_model: Any, task_module: Any, seed: int, device: str) -> BoundCandidate:
        raise NotImplementedError

    def result_fields(self) -> dict[str, Any]:
        """Fields of the child's result that say how the candidate was attached (none by default)."""
        return {}


class FunctionalBinding(CandidateBinding):
    """`model(*inputs, fn=forward)` on a private copy of the reference model (same parameter values)."""

    def __init__(self, forward: Callable[..., Any]):
        self.forward = forward

    def bind(self, reference_model: Any, task_module: Any, seed: int, device: str) -> BoundCandidate:
        model = copy.deepcopy(reference_model)
        forward = self.forward
        return BoundCandidate(call=lambda *inputs: model(*inputs, fn=forward), state=named_state(model))


class ModelNewBinding(CandidateBinding):
    """A KernelBench `ModelNew`, built under the trial's seed exactly as the task's Model is, then given the
    reference's values wherever a name and a shape match (`model_new.py`)."""

    def __init__(self, model_class: type):
        self.model_class = model_class
        self.adopted: set[str] = set()  # state names whose values came from the reference, over every bind

    def bind(self, reference_model: Any, task_module: Any, seed: int, device: str) -> BoundCandidate:
        from builder.verify.child.model_new import FullPrecisionCall, adopt_reference_state, build_model_new

        try:
            model = build_model_new(self.model_class, task_module, seed, device)
        except Exception as exc:  # noqa: BLE001 - untrusted constructor
            raise CandidateFailure(f"ModelNew() failed: {exception_text(exc)}") from None
        try:
            self.adopted.update(adopt_reference_state(model, reference_model))
        except Exception as exc:  # noqa: BLE001 - its state_dict is the candidate's code
            raise CandidateFailure(f"ModelNew's state could not take the reference's: {exception_text(exc)}") from None
        return BoundCandidate(call=FullPrecisionCall(model), state=named_state(model))

    def result_fields(self) -> dict[str, Any]:
        return {"reference_state_loaded": len(self.adopted)}


def run_candidate(bound: BoundCandidate, inputs: list[Any], device: str, output_bytes: list[int]) -> Any:
    """Poison the free memory, call the candidate, wait for the device (errors surface here)."""
    poison_free_memory(device, output_bytes)
    try:
        out = bound.call(*inputs)
        sync(device)
    except Exception as exc:  # noqa: BLE001 - untrusted code
        raise CandidateFailure(exception_text(exc)) from None
    if reason := plain_output_reason(out):  # read later, such an output could still be running code
        raise NotPlainOutput(reason)
    return out


class NotPlainOutput(CandidateFailure):
    """forward returned something other than plain torch.Tensor outputs (`lazy_output`)."""


def restore_state(state: dict[str, Any], pristine: dict[str, Any]) -> None:
    for name, tensor in state.items():
        tensor.data.copy_(pristine[name])


def _shapes_match(candidate_out: Any, manifest: dict[str, Any]) -> bool:
    """The candidate returned tensors of the reference's shapes (the manifest's), so a repeat call compares."""
    cand = flatten_outputs(candidate_out)
    shapes = manifest.get("output_shapes") or []
    return cand is not None and [list(t.shape) for t in cand] == shapes


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


@dataclass
class CandidateRun:
    """What the candidate's side found: its outputs by name (judged in the parent) and its own flags."""

    outputs: dict[str, Any] = field(default_factory=dict)
    flags: set[str] = field(default_factory=set)
    notes: dict[str, str] = field(default_factory=dict)
    trials: int = 0
    census: dict[str, Any] = field(default_factory=dict)
    error: str | None = None  # the candidate raised (runtime_error)
    error_origin: str | None = None
    side_stream_probe: Any = None  # (bound, inputs) for the clock half of the side-stream check
    binding_fields: dict[str, Any] = field(default_factory=dict)  # CandidateBinding.result_fields
    step_s: dict[str, float] = field(default_factory=dict)  # CheckSteps.seconds: where the checks' time went

    def flag(self, name: str, why: str) -> None:
        self.flags.add(name)
        self.notes.setdefault(name, why)

    def time_side_stream(self) -> None:
        """The side-stream check's clock half: it weighs a host clock's wait on the device, which other processes
        on the device or the cores would skew, so it runs once the device is this candidate's alone (just
        before its timing window)."""
        if self.side_stream_probe is None:
            return
        from builder.verify.child.side_stream import side_stream_timing_reason

        reason = side_stream_timing_reason(*self.side_stream_probe)
        self.side_stream_probe = None
        if reason:
            self.flag("side_stream", reason)

    def result(self) -> dict[str, Any]:
        """The child's result fields (status, flags, ...) before the judge has compared anything."""
        return {
            "status": "runtime_error" if self.error else "correct",
            "flags": sorted(self.flags),
            "error": self.error,
            "error_origin": self.error_origin,
            "flag_notes": dict(sorted(self.notes.items())),
            "trials": self.trials,
            "own_kernel_fraction": self.census.get("own_kernel_fraction"),
            "kernels_seen": self.census.get("kernels_seen", []),
            "op_census": {k: v for k, v in self.census.items() if k not in ("kernels_seen", "torch_profile")},
            "torch_profile": self.census.get("torch_profile"),
            **self.binding_fields,
        }


def run_queue_s() -> float:
    """Seconds the calling thread has waited, runnable, for a core (the kernel's schedstat; 0.0 where the kernel
    keeps none). A step's wall beyond its CPU and this waited on something else: the GPU, a file, a lock."""
    try:
        with open("/proc/thread-self/schedstat") as handle:
            return int(handle.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


class CheckSteps:
    """Between two steps of the checks: gives the device to a waiting window (`yield_to_window`), and keeps the
    wall and CPU seconds (this process, all threads) and the run-queue wait (this thread: `run_queue_s`) of each
    kind of step, the time yielded to windows not included. The child reports them as phases "check.<step>",
    "cpu.check.<step>" and "rq.check.<step>": the bench's breakdown of the checks."""

    def __init__(self, yield_to_window: Callable[[], None], first: str) -> None:
        self.yield_to_window = yield_to_window
        self.seconds: dict[str, float] = {}
        self._step = first
        self._wall, self._cpu, self._rq = time.perf_counter(), time.process_time(), run_queue_s()

    def __call__(self, step: str) -> None:
        """The step in progress ends; `step` begins once no window waits for the device."""
        self.stop()
        self.yield_to_window()
        self._step = step
        self._wall, self._cpu, self._rq = time.perf_counter(), time.process_time(), run_queue_s()

    def stop(self) -> None:
        wall, cpu, rq = time.perf_counter(), time.process_time(), run_queue_s()
        for name, seconds in ((f"check.{self._step}", wall - self._wall), (f"cpu.check.{self._step}", cpu - self._cpu),
                              (f"rq.check.{self._step}", rq - self._rq)):  # fmt: skip
            self.seconds[name] = round(self.seconds.get(name, 0.0) + seconds, 4)
        self._wall, self._cpu, self._rq = wall, cpu, rq


def run_candidate_side(binding: Any, task_module: Any, job: dict[str, Any], manifest: dict[str, Any],
                       between_steps: Callable[[], None] | None = None) -> CandidateRun:  # fmt: skip
    """Every candidate call of the checks; never computes a trial's reference. `manifest` is the clean
    reference's public manifest (sizes, shapes, responsive targets, probe seed). `between_steps` runs between
    every two steps (a trial's first call, its repeat, the census, the side-stream probe, each perturbed run,
    the probe): the child yields the device there to a waiting window, so a window waits for one step of each
    check in flight, not for a whole trial."""
    import torch

    binding = binding if isinstance(binding, CandidateBinding) else FunctionalBinding(binding)
    device = "cuda" if job.get("backend") == "cuda" else "cpu"
    run = CandidateRun()
    steps = CheckSteps(between_steps or _no_pause, first="build_trial")
    try:
        with torch.no_grad():
            _trials(binding, task_module, job, device, manifest, run, steps)
            steps("probe")
            model, inputs = instantiate(task_module, int(manifest["probe_seed"]), device)
            try:
                run.outputs["probe"] = run_reference(model, inputs, device)
            except ReferenceFailure as exc:  # the clean child ran it: here it fails only if something changed it
                run.outputs["probe"] = f"the reference raised here but not in the clean child: {exc}"
    except NotPlainOutput as exc:
        run.flag("lazy_output", str(exc))
    except CandidateFailure as exc:
        run.error, run.error_origin = str(exc), "candidate"
    steps.stop()
    run.step_s = steps.seconds
    run.binding_fields = binding.result_fields()
    return run


def _no_pause() -> None:
    pass


def _trials(binding: CandidateBinding, task_module: Any, job: dict, device: str, manifest: dict[str, Any],
            run: CandidateRun, steps: CheckSteps) -> None:  # fmt: skip
    tolerance = (float(job["atol"]), float(job["rtol"]))
    out_bytes = [int(n) for n in manifest.get("output_bytes") or []]
    for index, seed in enumerate(trial_seeds(job)):
        if index:
            steps("build_trial")
        model, inputs = instantiate(task_module, seed, device)
        pristine = snapshot(inputs)
        bound = binding.bind(model, task_module, seed, device)
        pristine_state = snapshot(list(bound.state.values()))
        candidate_inputs = snapshot(pristine)
        steps("call")  # the model and inputs are made (a large model takes a while): the call is a step of its own
        out = run_candidate(bound, candidate_inputs, device, out_bytes)
        run.outputs[f"trial{index}"] = out
        run.trials += 1
        mutated = [f"input {i}" for i in changed_positions(candidate_inputs, pristine)]
        names = list(bound.state)
        mutated += [f"parameter {names[i]}" for i in changed_positions(list(bound.state.values()), pristine_state)]
        if mutated:
            run.flag("input_mutation", f"the candidate changed {', '.join(mutated[:4])}")
        if _shapes_match(out, manifest):
            steps("repeat")
            restore_state(bound.state, dict(zip(names, pristine_state, strict=True)))
            again = run_candidate(bound, snapshot(pristine), device, out_bytes)
            repeat = compare_outputs(again, out, *tolerance)
            # Poison showing through differs call to call; the judge's uninitialized_output names that cause.
            if not repeat.ok and not _holds_poison(out):
                run.flag("nondeterministic", f"two calls on the same inputs disagreed ({repeat.error})")
        if index == 0:
            _first_trial_extras(binding, task_module, job, device, run, seed, model, pristine, steps)
            if _shapes_match(out, manifest):
                _perturbed_runs(binding, task_module, seed, device, model, pristine, manifest, run, out_bytes, steps)


def _holds_poison(value: Any) -> bool:
    return any(bool(mask.any()) for t in flatten_outputs(value) or [] if (mask := holds_poison(t)) is not None)


def _perturbed_runs(binding: CandidateBinding, task_module: Any, seed: int, device: str, model: Any,
                    pristine: list[Any], manifest: dict[str, Any], run: CandidateRun, out_bytes: list[int],
                    steps: CheckSteps) -> None:  # fmt: skip
    """The candidate under each perturbation the reference responds to, with the clean side's exact noise."""
    targets = perturbation_targets(model, pristine)
    for entry in manifest.get("responsive_targets") or []:
        index = int(entry[0])
        if index >= len(targets):
            continue
        kind, key = targets[index]
        steps("perturbed")
        bound = binding.bind(copy.deepcopy(model), task_module, seed, device)
        inputs = snapshot(pristine)
        if kind == "input":
            inputs[key] += perturbation(inputs[key], seed, index)
        else:
            if key not in bound.state:  # a ModelNew without this parameter: cannot perturb it alike
                continue
            bound.state[key].data += perturbation(named_state(model)[key], seed, index)
        run.outputs[f"perturbed{index}"] = run_candidate(bound, inputs, device, out_bytes)


def _first_trial_extras(binding: CandidateBinding, task_module: Any, job: dict, device: str, run: CandidateRun,
                        seed: int, model: Any, pristine: list[Any],
                        steps: CheckSteps) -> None:  # fmt: skip
    """Checks that need one call each: torch-op census and, on CUDA, the side-stream probes."""
    steps("census")
    bound = binding.bind(copy.deepcopy(model), task_module, seed, device)
    run.census = _op_census(bound, pristine, device, job)
    if run.census.get("uses_torch_ops"):
        share = run.census.get("library_fraction") or 0.0
        run.flag("uses_torch_ops", f"{share:.0%} of the call's time in PyTorch/library kernels")
    if device == "cuda":
        from builder.verify.child.side_stream import side_stream_output_reason

        steps("side_stream")
        reason = side_stream_output_reason(bound, pristine)
        if reason:
            run.flag("side_stream", reason)
        run.side_stream_probe = (bound, pristine)
