"""How many bytes of each perturbation target the reference's output depends on (clean reference side).

The runtime floor (`floor.py`) counts the inputs, parameters and buffers whose perturbation moved the reference's
output. A whole tensor can move the output while most of it is never read: an embedding table of which a batch
looks up a few rows, an input a task slices. Counting such a tensor whole would put the floor above an honest
kernel's runtime, so each target counts only its elements that the output's gradient reaches (nonzero, under random
output weights, so that a softmax's rows summing to one do not cancel), at three points: as given, with the
inputs negated and with the parameters negated (a ReLU's gate or a max's choice can shut an element out at one
point and not at another; negating both at once can leave a gate as it was). Where the gradient
cannot reach an element the output still depends on (a comparison, an index, a gate closed at both points), the
count would be lower than the truth: so the elements it never reached are given large values at once, and
where that moves the output (a max's or a clamp's losers, read to be compared) the target counts whole; where it
does not (the rows an embedding skips, the columns a slice drops) they are left out. A task whose reference
autograd cannot differentiate, or whose outputs the gradient cannot reach (an argmax's indices), counts its targets
whole: such an output needs all of them read.
"""

from __future__ import annotations

import copy
from typing import Any

from builder.verify.protocol.compare import compare_outputs, flatten_outputs


def dependent_bytes(model: Any, inputs: list[Any], targets: list[tuple[str, Any]],
                    tolerance: tuple[float, float]) -> list[int]:  # fmt: skip
    """Bytes of each target (`reference.perturbation_targets`' order) that the output depends on."""
    import torch

    from builder.verify.child.precision import named_state

    tensors = [inputs[key] if kind == "input" else named_state(model)[key] for kind, key in targets]
    whole = [t.numel() * t.element_size() for t in tensors]
    for with_buffers in (True, False):
        try:
            masks = [_reached(model, inputs, targets, flip, with_buffers) for flip in ((), ("input",), ("parameter",))]
            counts = []
            for index, size in enumerate(whole):
                reached = [mask[index] for mask in masks]
                if any(mask is None for mask in reached):
                    counts.append(size)  # not differentiated (a buffer): whole
                    continue
                union = reached[0] | reached[1] | reached[2]
                if not bool(union.all()) and _moves(model, inputs, targets[index], ~union, tolerance):
                    counts.append(size)  # read to be compared (a max, a clamp): the gradient's zeros are values'
                    continue
                counts.append(int(union.sum()) * tensors[index].element_size())
            return counts
        except torch.OutOfMemoryError:
            torch.cuda.empty_cache()
            return whole
        except Exception:  # noqa: BLE001 - the task's code under autograd: its targets count whole
            continue
    return whole


def _moves(model: Any, inputs: list[Any], target: tuple[str, Any], unreached: Any,
           tolerance: tuple[float, float]) -> bool:  # fmt: skip
    """Whether the output changes when the elements of `target` the gradient never reached take large values, a
    hundred times the target's mean magnitude, once each away from and past zero from where they were: a max's or
    a clamp's losers (read, compared, shut out) move it one way or the other; the rows an embedding does not look
    up and the columns a slice drops move it neither way."""
    import torch

    from builder.verify.child.precision import full_precision, named_state

    kind, key = target
    for direction in (1.0, -1.0):
        copy_of = copy.deepcopy(model)
        values = [x.detach().clone() if isinstance(x, torch.Tensor) else x for x in inputs]
        tensor = values[key] if kind == "input" else named_state(copy_of)[key]
        with torch.no_grad(), full_precision():
            before = copy_of(*values)
            scale = float(tensor.detach().abs().double().mean()) if tensor.numel() else 0.0
            sign = torch.where(tensor >= 0, 1.0, -1.0).to(tensor.dtype)
            tensor.copy_(torch.where(unreached, sign * (direction * 100.0 * (scale if scale > 0 else 1.0)), tensor))
            if not compare_outputs(copy_of(*values), before, *tolerance).ok:
                return True
    return False


def _reached(model: Any, inputs: list[Any], targets: list[tuple[str, Any]], flip: tuple[str, ...],
             with_buffers: bool) -> list[Any]:  # fmt: skip
    """Per target, a bool mask of the elements the gradient reached with the targets of the kinds in `flip` negated
    (None: a buffer left out)."""
    import torch

    from builder.verify.child.precision import full_precision, named_state

    copy_of = copy.deepcopy(model)
    state = named_state(copy_of)
    parameters = {name for name, _ in copy_of.named_parameters()}
    values = [x.detach().clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    leaves: list[Any] = []
    with torch.no_grad():
        for kind, key in targets:
            tensor = values[key] if kind == "input" else state[key]
            if kind != "input" and key not in parameters and not with_buffers:
                leaves.append(None)
                continue
            if kind in flip and (kind == "input" or key in parameters):  # a running variance stays positive
                tensor.neg_()
            leaves.append(tensor.requires_grad_(True))
    with torch.enable_grad(), full_precision():
        outputs = [o for o in flatten_outputs(copy_of(*values)) or [] if o.requires_grad]
        if not outputs:
            raise ValueError("no output the gradient reaches (an integer or detached output): targets count whole")
        weights = []
        for output in outputs:
            generator = torch.Generator(device=output.device).manual_seed(len(weights))
            weights.append(torch.randn(output.shape, generator=generator, device=output.device, dtype=output.dtype))
        wanted = [leaf for leaf in leaves if leaf is not None]
        grads = torch.autograd.grad(outputs, wanted, grad_outputs=weights, allow_unused=True)
    by_leaf = iter(grads)
    masks = []
    for leaf in leaves:
        if leaf is None:
            masks.append(None)
            continue
        grad = next(by_leaf)
        masks.append(torch.zeros(leaf.shape, dtype=torch.bool, device=leaf.device) if grad is None else grad != 0)
    return masks
