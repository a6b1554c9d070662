"""The parent's judging of one kernel's outputs, on the CPU: what each evaluation child waits for before its
timing window (`find_checks`: five trials, two perturbed inputs, the bit-exact probe) and what the parent does
with a window's revealed outputs afterwards (seven digests and comparisons), on synthetic float32 outputs of a
given size (16 M values: a 4096 x 4096 matmul's). Beside them, torch's whole-tensor `same_bits`, a pass the judge
no longer takes, and torch's int64 sum of the words, the digest that SHA-256 over chunks replaced.

    python benchmarks/bench_judge.py [--values N] [--repeat N] [--threads N]

Prints wall and CPU seconds (the whole process's, the judge's threads included) per kernel, torch's intra-op
threads, the judge's threads (`config.JUDGE_THREADS`, `--threads`) and the machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from builder import config  # noqa: E402
from builder.verify.judge.outputs import find_checks  # noqa: E402
from builder.verify.judge.referee import HalfBlock, WindowReport  # noqa: E402
from builder.verify.judge.window import judge_window  # noqa: E402
from builder.verify.protocol import compare, tensor_files  # noqa: E402
from builder.verify.protocol.window import digest  # noqa: E402

TRIALS, PERTURBED, REVEALED = 5, 2, 7


def outputs(directory: Path, values: int, seed: int, noise: float) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    names = [f"trial{i}" for i in range(TRIALS)] + [f"perturbed{i}" for i in range(PERTURBED)] + ["probe"]
    names += [f"timed{i}" for i in range(REVEALED)]
    reference = {name: torch.randn(values, generator=generator) for name in names}
    written = {name: t + noise * torch.randn(values, generator=generator) if noise else t
               for name, t in reference.items()}  # fmt: skip
    written["probe"] = reference["probe"]  # the probe is the task's own reference: bit for bit
    tensor_files.write_dir(directory, written)
    return written


def timed(work) -> tuple[float, float]:
    began, began_cpu = time.perf_counter(), time.process_time()
    work()
    return time.perf_counter() - began, time.process_time() - began_cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", type=int, default=16 << 20, help="values in each output (default 16 M)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=config.JUDGE_THREADS, help="the judge's threads")
    args = parser.parse_args()
    if args.values < 1 or args.repeat < 1 or args.threads < 1:
        parser.error("--values, --repeat and --threads must be at least 1")
    config.JUDGE_THREADS = args.threads
    print(f"machine: {platform.node()} {platform.machine()} cpus={os.cpu_count()} torch={torch.__version__} "
          f"intra-op threads={torch.get_num_threads()} judge threads={args.threads} values/output={args.values:,}")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="ka-bench-judge-") as scratch:
        reference_dir, candidate_dir = Path(scratch) / "reference", Path(scratch) / "candidate"
        outputs(reference_dir, args.values, 1, 0.0)
        outputs(candidate_dir, args.values, 1, 1e-6)
        limit = 2 * 4 * args.values + (1 << 20)
        reference = tensor_files.OutputsDir(reference_dir, limit, keep_loaded=False)
        manifest = {"trials": TRIALS, "probe_bit_exact": True,
                    "responsive_targets": [[i, "input", i] for i in range(PERTURBED)]}  # fmt: skip
        figures: dict[str, list[tuple[float, float]]] = {}

        def judge_checks() -> None:
            found = find_checks(tensor_files.OutputsDir(candidate_dir, limit), reference, manifest, 1e-4, 1e-4)
            assert not found.errors and "tampers_reference" not in found.flags, (found.errors, found.flags)

        committed = {m: digest(tensor_files.tensors_of(tensor_files.OutputsDir(candidate_dir, limit).get(
            f"timed{m}"))) for m in range(REVEALED)}  # fmt: skip

        def judge_reveals() -> None:
            candidate = tensor_files.OutputsDir(candidate_dir, limit)
            calls = [(m, 0.1, committed[m]) for m in range(REVEALED)]
            report = WindowReport(halves=[HalfBlock("candidate", 1.0, calls), HalfBlock("eager", 1.0, calls)],
                                  revealed={m: candidate.get(f"timed{m}") for m in range(REVEALED)})  # fmt: skip
            verdict = judge_window(report, reference, "cpu", 1e-4, 1e-4)
            assert verdict.error is None and not verdict.flags, (verdict.error, verdict.flags)

        probe = tensor_files.tensors_of(reference.get("probe"))[0]
        same = probe.clone()

        def torch_same_bits() -> None:
            assert bool(((probe == same) | (probe.isnan() & same.isnan())).all())

        def words_sum() -> None:
            probe.view(torch.int32).sum(dtype=torch.int64)

        parts = {"find_checks (what the child waits for)": judge_checks,
                 "7 reveals: digests, comparisons (judge_window)": judge_reveals,
                 "same_bits, numpy chunks": lambda: compare.same_bits(probe, same),
                 "same_bits, torch whole-tensor": torch_same_bits,
                 "digest, SHA-256 over chunks": lambda: digest([probe]),
                 "the former digest, torch int64 sum": words_sum}  # fmt: skip
        for _ in range(args.repeat):
            for name, work in parts.items():
                figures.setdefault(name, []).append(timed(work))
    for name, runs in figures.items():
        wall, cpu = statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)
        print(f"  {name:<48} wall {wall:7.3f} s  cpu {cpu:7.3f} s  (median of {len(runs)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
