"""The task's reference outputs, computed where no candidate code has ever run (clean side).

Runs in the reference child (`python -m builder.verify.child.main JOB` in mode "reference"), a sandboxed process
that loads the task and nothing else, once per task and seed set; every candidate of the task is judged
against what it wrote. A candidate's own process never computes a reference output that a verdict rests on:
anything that runs when a candidate loads (a C++ static initializer, an operator registration, a Python
module's top level) could otherwise change what the reference computes and make the comparison pass.

What is computed, for the job's trial seeds (the checks), the probe seed (the tampering probe) and the
timing seeds (the outputs of timed calls):
- `trial{i}`: the reference output of trial i;
- `perturbed{k}`: the reference output of trial 0 with perturbation target k applied (ignores_input);
- `probe`: the reference output for the probe seed, computed twice to learn whether it is bit-exact;
- `timing{j}`: the reference output of timing input set j;
- `timed{m}`: the reference output of timed call m of a candidate's window, for the calls the parent chose in
  secret (`timed_samples` in the manifest: never in the public one), on inputs drawn from their secret seeds.

The manifest (`public_manifest`) says what a candidate's child may know: output sizes (for the poison),
shapes, which perturbation targets move the reference, the probe seed. It holds no output values. The full
manifest also gives the bytes of each perturbation target that the output depends on (`target_bytes`,
`dependence.py`): the parent's runtime floor (`floor.py`).
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, field
from typing import Any

from builder import config
from builder.tasks import draw_inputs, instantiate
from builder.verify.child.dependence import dependent_bytes
from builder.verify.child.precision import full_precision, named_state
from builder.verify.protocol.compare import compare_outputs, flatten_outputs, output_nbytes, same_bits, snapshot, sync
from builder.verify.protocol.plan import public_manifest


class ReferenceFailure(Exception):
    """The task's reference code raised: not the candidate's fault."""


def derived_seed(base: int, purpose: str, index: int = 0) -> int:
    digest = hashlib.sha256(f"{purpose}:{base}:{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def probe_seed(seeds: list[int]) -> int:
    """The tampering probe's seed: derived from the build's secret seeds, different from every trial's."""
    return derived_seed(seeds[0], "probe")


def run_reference(model: Any, inputs: list[Any], device: str) -> Any:
    from builder.verify.child.failures import exception_text

    try:
        with full_precision():
            out = model(*inputs)
            sync(device)
    except Exception as exc:  # noqa: BLE001 - task code
        raise ReferenceFailure(f"reference failed: {exception_text(exc)}") from None
    return out


def perturbation_targets(model: Any, inputs: list[Any]) -> list[tuple[str, Any]]:
    """Every float input (by position) and float parameter or buffer (by name), in a fixed order."""
    import torch

    targets: list[tuple[str, Any]] = [
        ("input", i) for i, v in enumerate(inputs) if torch.is_tensor(v) and v.is_floating_point()
    ]
    targets += [("parameter", n) for n, t in named_state(model).items() if t.is_floating_point()]
    return targets


def perturbation(tensor: Any, seed: int, index: int) -> Any:
    """Noise for target `index` of the trial with `seed`: the same on the clean and the candidate's side, which
    run on the same device (a build's references are per GPU model). Drawn on the tensor's device by that
    device's generator, not drawn on the host and copied over: the candidate's child draws it inside its
    shared hold."""
    import torch

    generator = torch.Generator(device=tensor.device).manual_seed(derived_seed(seed, "perturb", index))
    noise = torch.randn(tuple(tensor.shape), generator=generator, dtype=torch.float32, device=tensor.device)
    scale = float(tensor.detach().abs().double().mean()) if tensor.numel() else 0.0
    scale = config.PERTURB_SCALE * (scale if scale > 0 else 1.0)
    return (noise * scale).to(dtype=tensor.dtype)


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


@dataclass
class ReferenceBundle:
    """Reference outputs by name (see the module docstring) and the manifest describing them."""

    outputs: dict[str, Any] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)

    def public_manifest(self) -> dict[str, Any]:
        return public_manifest(self.manifest)


def compute_reference(task_module: Any, job: dict[str, Any]) -> ReferenceBundle:
    """Every reference output a candidate of this task and seed set is judged against."""
    import torch

    from builder.verify.protocol.plan import timing_seeds, trial_seeds

    device = "cuda" if job.get("backend") == "cuda" else "cpu"
    atol, rtol = float(job["atol"]), float(job["rtol"])
    seeds = trial_seeds(job)
    bundle = ReferenceBundle()
    manifest = bundle.manifest
    manifest.update(trials=len(seeds), probe_seed=probe_seed(seeds), responsive_targets=[], error=None)
    try:
        with torch.no_grad():
            for index, seed in enumerate(seeds):
                model, inputs = instantiate(task_module, seed, device)
                out = run_reference(copy.deepcopy(model), snapshot(inputs), device)
                bundle.outputs[f"trial{index}"] = out
                if index == 0:
                    manifest["output_bytes"] = output_nbytes(out)
                    manifest["output_shapes"] = [list(t.shape) for t in flatten_outputs(out) or []]
                    manifest["degenerate"] = degenerate_reason(out, atol, rtol)
                    targets = perturbation_targets(model, inputs)
                    manifest["target_bytes"] = dependent_bytes(model, inputs, targets, (atol, rtol))
                    _perturbed_references(bundle, model, inputs, seed, device, out, (atol, rtol))
            model, inputs = instantiate(task_module, manifest["probe_seed"], device)
            first = run_reference(copy.deepcopy(model), snapshot(inputs), device)
            second = run_reference(model, snapshot(inputs), device)
            pairs = zip(flatten_outputs(first) or [], flatten_outputs(second) or [], strict=False)
            manifest["probe_bit_exact"] = all(same_bits(a, b) for a, b in pairs)
            bundle.outputs["probe"] = first
            timing = timing_seeds(job)
            manifest["timing_sets"] = len(timing)
            models = []
            for index, seed in enumerate(timing):
                model, inputs = instantiate(task_module, seed, device)
                bundle.outputs[f"timing{index}"] = run_reference(model, inputs, device)
                models.append(model)
            manifest["timed_samples"] = _timed_references(bundle, task_module, models, job, device)
    except ReferenceFailure as exc:
        manifest["error"] = str(exc)
    return bundle


def _timed_references(bundle: ReferenceBundle, task_module: Any, models: list[Any], job: dict[str, Any],
                      device: str) -> list[list[int]]:  # fmt: skip
    """`timed{m}`: the reference of timed call m of a candidate's window, on the model of input set m mod sets and
    inputs drawn from the secret seed the parent chose for it (the child hears that seed only when the call runs)."""
    samples = []
    for m, input_set, seed in job.get("timed_samples") or []:
        inputs = draw_inputs(task_module, int(seed), device)
        bundle.outputs[f"timed{int(m)}"] = run_reference(models[int(input_set) % len(models)], inputs, device)
        samples.append([int(m), int(input_set) % len(models), int(seed)])
    return samples


def _perturbed_references(bundle: ReferenceBundle, model: Any, inputs: list[Any], seed: int, device: str,
                          reference_out: Any, tolerance: tuple[float, float]) -> None:  # fmt: skip
    """The reference under each perturbation target; the targets it responds to go into the manifest."""
    for index, (kind, key) in enumerate(perturbation_targets(model, inputs)):
        ref_model, ref_inputs = copy.deepcopy(model), snapshot(inputs)
        if kind == "input":
            ref_inputs[key] += perturbation(ref_inputs[key], seed, index)
        else:
            named_state(ref_model)[key].data += perturbation(named_state(ref_model)[key], seed, index)
        out = run_reference(ref_model, ref_inputs, device)
        if compare_outputs(out, reference_out, *tolerance).ok:
            continue  # the reference does not respond to this one: it says nothing about a candidate
        bundle.outputs[f"perturbed{index}"] = out
        bundle.manifest["responsive_targets"].append([index, kind, key])
