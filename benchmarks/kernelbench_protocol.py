"""What KernelBench's published correctness protocol says of a KernelBench generation folder, beside the archive's
re-verification of the same files (`kernel-archive reverify FOLDER`) on the same GPU.

The protocol, as KernelBench describes its evaluation: seed the generators and build the task's Model from its init
inputs, seed them again and build ModelNew from the same init inputs, both on the host and moved to the device; then
a few trials, each seeding the generators, drawing the task's inputs and comparing the two outputs with
`torch.allclose` at atol = rtol = 1e-2. It runs the generation's code in this process, unsandboxed: use it on files
you trust (the fixture folder). Each file maps onto a built-in task as the importer maps it.

    python benchmarks/kernelbench_protocol.py FOLDER [--device cuda|cpu] [--trials 5] [--only RE] [--json F]
    [--reverify REPORT_DIR]   # add the reverify run's verdict (its records.jsonl) beside each file's
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SEED = 42
TOLERANCE = 1e-2


def protocol_verdict(task, source_path: Path, device: str, trials: int) -> dict:
    """correct / incorrect / error (with why) for one ModelNew file under the protocol."""
    import torch

    from builder.tasks import load_task_module
    from builder.verify.child.main import load_model_new

    module = load_task_module(task, size="cpu" if device == "cpu" else "full")
    try:
        model_class = load_model_new(str(source_path))
        init_inputs = module.get_init_inputs()
        with torch.no_grad():
            torch.manual_seed(SEED)
            reference = module.Model(*init_inputs).to(device).eval()
            torch.manual_seed(SEED)
            candidate = model_class(*init_inputs).to(device).eval()
            worst = 0.0
            for trial in range(trials):
                torch.manual_seed(SEED + 1 + trial)
                inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
                want, got = reference(*inputs), candidate(*inputs)
                if want.shape != got.shape:
                    return {"verdict": "incorrect", "why": f"shape {tuple(got.shape)} != {tuple(want.shape)}"}
                worst = max(worst, float((want - got).abs().max()))
                if not torch.allclose(want, got, atol=TOLERANCE, rtol=TOLERANCE):
                    return {"verdict": "incorrect", "why": f"trial {trial + 1}: max_diff {worst:.3g}"}
    except Exception as exc:  # noqa: BLE001 - a generation's own failure is its verdict
        return {"verdict": "error", "why": f"{type(exc).__name__}: {exc}"[:300]}
    return {"verdict": "correct", "why": f"max_diff {worst:.3g} over {trials} trials"}


def reverify_verdicts(report_dir: Path) -> dict[str, str]:
    """kernel name -> status (+ reference_state_loaded) from a reverify run's records.jsonl."""
    found = {}
    path = report_dir / "records.jsonl"
    for line in path.read_text().splitlines() if path.exists() else []:
        record = json.loads(line)
        loaded = record.get("reference_state_loaded")
        found[record["kernel_name"]] = record["status"] + (f" (state loaded: {loaded})" if loaded else "")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--only", default=None, help="regular expression on the task id")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--reverify", type=Path, default=None, help="a reverify --out folder to read verdicts from")
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        print(f"error: no such folder: {args.folder}", file=sys.stderr)
        return 2
    from builder.generate.importers.folders import kernelbench_candidates
    from builder.tasks import load_suite

    tasks = {task.id: task for task in load_suite().tasks}
    notes: list[str] = []
    candidates = kernelbench_candidates(args.folder, list(tasks.values()), "protocol", notes)
    ours = reverify_verdicts(args.reverify) if args.reverify else {}
    rows = []
    for candidate in candidates:
        if args.only and not re.search(args.only, candidate.task_id):
            continue
        path = args.folder / candidate.source_ref.split(":", 1)[1]
        row = {"file": path.name, "task": candidate.task_id,
               **protocol_verdict(tasks[candidate.task_id], path, args.device, args.trials)}  # fmt: skip
        if ours:
            row["archive"] = ours.get(candidate.kernel_name, "not verified")
        rows.append(row)
        print(" | ".join(str(v) for v in row.values()), flush=True)
    for note in notes:
        print(f"left out: {note}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
