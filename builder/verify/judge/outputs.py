"""The verdict's comparisons, made in the trusted parent from two files (trusted side).

The clean reference child wrote the reference outputs; the candidate's child wrote what the candidate
returned (`tensor_files`). Neither process compares: the candidate's child can be changed by the code it
loads, so every comparison a verdict rests on is made here, on CPU copies:

- each trial's output against the reference (shape, dtype, device, allclose; NaN poison where the reference
  has a value is `uninitialized_output`);
- `ignores_input`: under a perturbation the reference responds to, the candidate's output did not move;
- `tampers_reference`: the task's reference, run in the candidate's child after the candidate loaded, no
  longer gives the clean child's output (bit for bit where the clean child's two runs were bit-identical);
- the first output of each timed input set against its reference (results reused across calls).

The child's own flags (input_mutation, nondeterministic, uses_torch_ops, side_stream, tampers_reference from
its state comparison) are kept; disqualifying flags turn `correct` into `incorrect`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from builder import config
from builder.verify.protocol.compare import Comparison, compare_outputs, same_bits
from builder.verify.protocol.tensor_files import devices_of, tensors_of
from schemas import disqualifying_flags

Outputs = Any  # name -> list of TensorOnDevice or a description: a dict, or a tensor_files.OutputsDir (get, in)


def compare_named(candidate: Any, reference: Any, atol: float, rtol: float, first_only: bool = False) -> Comparison:
    """compare_outputs on unpacked values, devices included (both sides moved their outputs to the CPU)."""
    if isinstance(reference, str):
        return Comparison(False, error=f"reference returned {reference}, not tensors")
    if candidate is None:
        return Comparison(False, error="the candidate's output is missing")
    if isinstance(candidate, str):
        return Comparison(False, error=f"candidate returned {candidate}, expected tensors")
    cand_devices, ref_devices = devices_of(candidate), devices_of(reference)
    comparison = compare_outputs(tensors_of(candidate), tensors_of(reference), atol, rtol, first_only)
    if comparison.ok and cand_devices != ref_devices:
        index = next(i for i, (c, r) in enumerate(zip(cand_devices, ref_devices, strict=True)) if c != r)
        return Comparison(False, comparison.max_diff, comparison.mean_diff,
                          error=f"output {index} on {cand_devices[index]}, reference on {ref_devices[index]}")  # fmt: skip
    return comparison


def _bit_identical(candidate: Any, reference: Any) -> bool:
    cand, ref = tensors_of(candidate), tensors_of(reference)
    if cand is None or ref is None or len(cand) != len(ref):
        return False
    return all(same_bits(c, r) for c, r in zip(cand, ref, strict=True))


def tamper_reason(candidate: Outputs, reference: Outputs, manifest: dict[str, Any], atol: float,
                  rtol: float) -> str | None:  # fmt: skip
    """Why the reference computed in the candidate's child shows tampering, or None."""
    probe = candidate.get("probe")
    if probe is None:
        return None  # the candidate raised before the probe ran: runtime_error says enough
    if isinstance(probe, str):
        return f"the task's reference in the candidate's process returned {probe}"
    if manifest.get("probe_bit_exact"):
        if not _bit_identical(probe, reference.get("probe")):
            return "the task's reference gave other bits in the candidate's process than in a clean process"
        return None
    comparison = compare_named(probe, reference.get("probe"), atol, rtol)
    if not comparison.ok:
        return f"the task's reference disagreed with a clean process's after the candidate loaded ({comparison.error})"
    return None


@dataclass
class CheckFindings:
    """What the comparisons of the checks' outputs found, before the child's claims are weighed: computed once
    per candidate (by the watcher, as soon as the outputs are written) and applied to whatever the child ends up
    claiming."""

    errors: list[str] = field(default_factory=list)
    flags: dict[str, str] = field(default_factory=dict)  # flag -> why
    max_diff: float | None = None
    mean_diff: float | None = None
    judged_trials: int = 0
    missing_trial: int | None = None  # the first trial without an output (fine only for a candidate that raised)


def find_checks(candidate: Outputs, reference: Outputs, manifest: dict[str, Any], atol: float,
                rtol: float) -> CheckFindings:  # fmt: skip
    """Every comparison the verdict of the checks rests on. They are made side by side (`side_by_side`) and read
    in the order a single pass would take: the first failing trial names the error, the first unmoved perturbation
    the flag."""
    found = CheckFindings()
    trials = []
    for index in range(int(manifest.get("trials") or 0)):
        if f"trial{index}" not in candidate:
            found.missing_trial = index
            break
        trials.append(index)
    first = candidate.get("trial0")
    moved = [(index, kind, key, candidate.get(f"perturbed{index}"))
             for index, kind, key in manifest.get("responsive_targets") or []]  # fmt: skip
    moved = [entry for entry in moved if entry[3] is not None and first is not None]
    work = [partial(_compare_names, candidate, reference, f"trial{index}", atol, rtol) for index in trials]
    work += [partial(compare_named, value, first, atol, rtol, first_only=True) for _, _, _, value in moved]
    work.append(partial(tamper_reason, candidate, reference, manifest, atol, rtol))
    results = side_by_side(work)
    mean_diffs: list[float] = []
    for index, comparison in zip(trials, results, strict=False):
        found.judged_trials += 1
        if comparison.max_diff is not None:
            found.max_diff = max(found.max_diff or 0.0, comparison.max_diff)
        if comparison.mean_diff is not None:
            mean_diffs.append(comparison.mean_diff)
        if comparison.uninitialized:
            found.flags.setdefault("uninitialized_output",
                                   "the poison (all-ones NaN) in the output where the reference has a value")  # fmt: skip
        if not comparison.ok and not found.errors:
            found.errors.append(f"trial {index + 1}: {comparison.error}")
    found.mean_diff = sum(mean_diffs) / len(mean_diffs) if mean_diffs else None
    if manifest.get("degenerate"):
        found.flags.setdefault("degenerate_task", str(manifest["degenerate"]))
    for (index, kind, key, value), unmoved in zip(moved, results[len(trials) :], strict=False):
        if unmoved.ok and not compare_named(value, reference.get(f"perturbed{index}"), atol, rtol, first_only=True).ok:
            found.flags.setdefault("ignores_input",
                                   f"output did not change when {kind} {key} was perturbed (the reference did)")  # fmt: skip
            break
    reason = results[-1]
    if reason:
        found.flags.setdefault("tampers_reference", reason)
    return found


def _compare_names(candidate: Outputs, reference: Outputs, name: str, atol: float, rtol: float) -> Comparison:
    return compare_named(candidate.get(name), reference.get(name), atol, rtol)


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def side_by_side(work: list[Callable[[], Any]]) -> list[Any]:
    """Each call's result, in order. The calls run on a pool of `config.JUDGE_THREADS` threads (as set when it is
    first used; 1 runs them in the caller) that every evaluation's judge shares: numpy's passes over cache-sized
    chunks release the GIL, so one kernel's outputs are compared on several cores, and all the judges together
    never take more than that many. An exception is raised where a single pass would have met it first."""
    global _pool
    if config.JUDGE_THREADS <= 1 or len(work) <= 1:
        return [call() for call in work]
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(config.JUDGE_THREADS, thread_name_prefix="ka-compare")
    futures = [_pool.submit(call) for call in work]
    return [future.result() for future in futures]


def apply_findings(child_result: dict[str, Any], found: CheckFindings) -> dict[str, Any]:
    """The child's result with the comparisons' findings: status, flags, error, max_diff, mean_diff."""
    result = dict(child_result)  # untrusted: only well-typed flags and notes are kept
    flags = (
        {f for f in result.get("flags") or [] if isinstance(f, str)} if isinstance(result.get("flags"), list) else set()
    )
    raw_notes = result.get("flag_notes") if isinstance(result.get("flag_notes"), dict) else {}
    notes = {str(k): str(v) for k, v in raw_notes.items()}
    errors = list(found.errors)
    if found.missing_trial is not None and result.get("status") == "correct" and not errors:
        errors.append(f"trial {found.missing_trial + 1}: the candidate's output is missing")
    for name, why in found.flags.items():
        flags.add(name)
        notes.setdefault(name, why)
    if "uninitialized_output" in flags:  # the poison differs call to call: it, not randomness, explains a repeat
        flags.discard("nondeterministic")
        notes.pop("nondeterministic", None)
    status = str(result.get("status") or "crash")
    disqualified = sorted(flags & disqualifying_flags())
    if status == "correct" and (errors or disqualified):
        status = "incorrect"
    if status == "incorrect" or (status == "correct" and not result.get("error")):
        lines = errors[:1] + [f"{name}: {notes.get(name, 'flagged by the candidate side')}" for name in disqualified]
        # The child's own reason stands where the comparisons found none (outputs stale across timed calls).
        kept = str(result["error"]) if status == "incorrect" and result.get("error") else None
        result["error"] = "; ".join(lines) or kept
    result.update(status=status, flags=sorted(flags), trials=found.judged_trials, flag_notes=dict(sorted(notes.items())),
                  max_diff=found.max_diff, mean_diff=found.mean_diff)  # fmt: skip
    return result


def judge_checks(child_result: dict[str, Any], candidate: Outputs, reference: Outputs, manifest: dict[str, Any],
                 atol: float, rtol: float) -> dict[str, Any]:  # fmt: skip
    """The child's result with the comparisons made: status, flags, error, max_diff, mean_diff."""
    return apply_findings(child_result, find_checks(candidate, reference, manifest, atol, rtol))


def judge_timing(candidate: Outputs, reference: Outputs, sets: int, atol: float, rtol: float) -> str | None:
    """The first output of each timed input set against its reference: why it failed, or None."""
    work = [partial(_compare_names, candidate, reference, f"timing{index}", atol, rtol) for index in range(sets)]
    for index, comparison in enumerate(side_by_side(work)):
        if not comparison.ok:
            return f"timed input set {index + 1}: {comparison.error} - results reused across calls?"
    return None
