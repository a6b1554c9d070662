"""Sandbox child: does an LLM-written functional form compute what the original module computes?

Run as `python -m builder.generate.llm.functional_child JOB.json` inside the sandbox only: it executes
the untrusted task file the LLM wrote. Job: {"original", "candidate" (task file paths), "seeds",
"size", "device", "atol", "rtol", "result_path"}. Writes {"ok": bool, "reason": str|null,
"max_diff": float|null} to result_path.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _compare(job: dict) -> dict:
    import torch

    from builder.tasks.loading import instantiate, load_task_module
    from builder.tasks.suite import describe_task_file

    original = load_task_module(describe_task_file(Path(job["original"])), size=job["size"])
    candidate_task = describe_task_file(Path(job["candidate"]))
    if not candidate_task.has_functional:
        return {"ok": False, "reason": "no module_fn, or Model.forward lacks fn=module_fn", "max_diff": None}
    candidate = load_task_module(candidate_task, size=job["size"])
    worst = 0.0
    for seed in job["seeds"]:
        ref_model, ref_inputs = instantiate(original, seed, job["device"])
        new_model, new_inputs = instantiate(candidate, seed, job["device"])
        if len(ref_inputs) != len(new_inputs) or any(
            isinstance(a, torch.Tensor)
            and (not isinstance(b, torch.Tensor) or a.shape != b.shape or not torch.equal(a, b))
            for a, b in zip(ref_inputs, new_inputs, strict=True)
        ):
            return {"ok": False, "reason": "get_inputs() differs from the original", "max_diff": None}
        with torch.no_grad():
            expected = ref_model(*ref_inputs)
            # fn passed explicitly: the verifier will substitute the kernel the same way.
            got = new_model(*new_inputs, fn=candidate.module_fn)
        if isinstance(expected, (tuple, list)):
            if not isinstance(got, (tuple, list)) or len(got) != len(expected):
                return {"ok": False, "reason": "returns a different number of outputs", "max_diff": None}
            pairs = list(zip(expected, got, strict=True))
        else:
            pairs = [(expected, got)]
        for exp, out in pairs:
            if not isinstance(out, torch.Tensor) or out.shape != exp.shape:
                return {
                    "ok": False,
                    "reason": f"output shape {getattr(out, 'shape', type(out))} != {exp.shape}",
                    "max_diff": None,
                }
            diff = float((out.float() - exp.float()).abs().max()) if exp.numel() else 0.0
            worst = max(worst, diff)
            if not torch.allclose(out.float(), exp.float(), atol=job["atol"], rtol=job["rtol"], equal_nan=True):
                return {
                    "ok": False,
                    "reason": f"output differs from the module form (max |diff| {diff:.3g}, seed {seed})",
                    "max_diff": diff,
                }
    return {"ok": True, "reason": None, "max_diff": worst}


def main(argv: list[str]) -> int:
    job = json.loads(Path(argv[1]).read_text())
    try:
        result = _compare(job)
    except Exception as exc:  # noqa: BLE001 - untrusted code: any failure is a rejection with its reason
        result = {"ok": False, "reason": f"{type(exc).__name__}: {str(exc)[:500]}", "max_diff": None}
    Path(job["result_path"]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
