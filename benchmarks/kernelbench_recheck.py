"""Kernels of the throughput mix through KernelBench's own flow again, by name: first as the bench sends them (its
compile pool, then a spawned process a kernel, at PyTorch's defaults), then each in this process with TF32 off in
cuDNN and cuBLAS. Where KernelBench judged a kernel otherwise than this engine, the two lines show whether its
verdict rests on a reference computed in TF32 (docs/benchmarks.md, "KernelBench's own flow beside the bench").

    KA_KERNELBENCH_DIR=CHECKOUT python3 benchmarks/kernelbench_recheck.py --kernels 96 --tasks 16 naive-3 fused_epilogues-5

The names are the bench's (`bench_verify_throughput.py --kernels N --tasks T` makes the same ones).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import kernelbench_flow as flow  # noqa: E402
from benchmarks.throughput_mix import corpus  # noqa: E402


def tf32_off() -> None:
    """cuDNN's and cuBLAS's TF32 off in this process (cuDNN's is on by PyTorch's default)."""
    import torch

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="+", help="kernel names of the mix, as the bench prints them")
    parser.add_argument("--kernels", type=int, default=96, help="the mix's size, as given to the bench")
    parser.add_argument("--tasks", type=int, default=16, help="the mix's tasks, as given to the bench")
    parser.add_argument("--backend", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--out", type=Path, help="the build folders (a fresh temporary folder unless given)")
    args = parser.parse_args(argv)
    module_name = flow.find_eval_module()
    if module_name is None:
        print(f"error: KernelBench is not importable (no `kernelbench`, nor `src` under ${flow.KERNELBENCH_DIR_ENV})",
              file=sys.stderr)  # fmt: skip
        return 2
    by_name = {
        candidate.kernel_name: (candidate, task) for candidate, task in corpus(args.backend, args.kernels, args.tasks)
    }
    unknown = [name for name in args.names if name not in by_name]
    if unknown:
        parser.error(f"not in a mix of {args.kernels} kernels over {args.tasks} tasks: {', '.join(unknown)}")
    kernels = []
    for name in args.names:
        candidate, task = by_name[name]
        kernels.append(
            (name, task.source, flow.model_new_source(task.source, candidate.source, candidate.language, name))
        )
    work_dir = args.out or Path(tempfile.mkdtemp(prefix="ka-kernelbench-recheck-"))
    result = flow.run_flow(kernels, module_name, len(kernels), work_dir, device=args.device)
    for name in args.names:
        print(f"defaults: {name}: {result.verdicts[name]}", flush=True)
    tf32_off()
    for index, (name, reference, source) in enumerate(kernels):
        verdict = flow._evaluate(module_name, reference, source, str(work_dir / f"kernel-{index}"), args.device)
        print(f"TF32 off: {name}: {verdict}", flush=True)
    return 0


if __name__ == "__main__":  # the flow's pools spawn processes that import this file again
    sys.exit(main())
