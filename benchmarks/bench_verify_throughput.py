"""Verification throughput: compile core-seconds per kernel, evaluation start-up cost, device seconds per
kernel and verified kernels/hour through `Verifier.stream`.

Runs the CUDA backend when a GPU is visible, else the CPU backend (slow: a CPU torch extension build
takes tens of seconds here). Distinct kernels are made from the bundled corpus by appending a
variant comment (a new source is a new kernel: no compile-cache hits). Prints figures and the machine.

    python benchmarks/bench_verify_throughput.py [--kernels N] [--backend cuda|cpu]
"""

from __future__ import annotations

import argparse
import os
import platform
import secrets
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from builder import config  # noqa: E402
from builder.candidates import Candidate  # noqa: E402
from builder.tasks import load_suite  # noqa: E402
from builder.verify import batching, environment  # noqa: E402
from builder.verify.compile import CompileResult, build_extension  # noqa: E402
from builder.verify.engine import Verifier, VerifyOptions  # noqa: E402
from builder.verify.pool import EvalPool, build_job, child_env, run_child  # noqa: E402
from builder.verify.sandbox import resolve_isolation  # noqa: E402


def corpus(backend: str, count: int) -> list[tuple[Candidate, object]]:
    """`count` distinct candidates of tasks that have bundled kernels for this backend."""
    suite = load_suite()
    suffix = ".cu" if backend == "cuda" else ".cpp"
    files = sorted((config.CANDIDATES_DIR / backend).glob(f"level*/*/*{suffix}"))
    if not files:
        raise SystemExit(f"no bundled {backend} candidates under {config.CANDIDATES_DIR / backend}")
    tag = secrets.token_hex(4)  # a fresh tag per run: nothing is served from an earlier run's cache
    pairs = []
    for index in range(count):
        path = files[index % len(files)]
        level, number = int(path.parts[-3].removeprefix("level")), int(path.parent.name.split("_", 1)[0])
        task = suite.get(f"{level}/{number}")
        source = path.read_text() + f"\n// benchmark variant {tag}-{index}\n"
        pairs.append((Candidate(task_id=task.id, source=source, language="cuda" if backend == "cuda" else "cpp",
                                kernel_name=f"{path.stem}-{index}", generator="bundled"), task))  # fmt: skip
    return pairs


def measure_compile(pairs, options: VerifyOptions) -> dict[str, float]:
    """The same candidates built in shared builds and one by one, each into an empty cache."""
    sources = [(c.source, c.language) for c, _ in pairs]
    figures = {}
    for label, size in (("batched", options.batch_size), ("one-by-one", 1)):
        cache = Path(tempfile.mkdtemp(prefix=f"ka-bench-{label}-"))
        options_here = replace(options, build_cache_dir=cache)
        started = time.monotonic()

        def build_here(source: str, language: str, o: VerifyOptions = options_here) -> CompileResult:
            return build_extension(source, language, o.backend, cache_dir=o.build_cache_dir,
                                   timeout_s=o.compile_timeout_s)  # fmt: skip

        results = batching.compile_many(sources, build_here, batch_size=size)
        wall = time.monotonic() - started
        # Each build reports its own CPU time (the compilers run inside the sandbox's PID namespace,
        # out of reach of this process's RUSAGE_CHILDREN). A batch that failed and was rebuilt one by one
        # counts its rebuilds only: the failed shared build is not visible here.
        builds = {(r.cache_key, r.cpu_s) for r in results if r is not None}
        cpu = sum(cpu_s for _, cpu_s in builds)
        ok = sum(1 for r in results if r is not None and r.ok)
        figures[f"compile {label}: core-s/kernel"] = cpu / len(sources)
        figures[f"compile {label}: wall s (serial)"] = wall
        figures[f"compile {label}: built ok"] = ok
    return figures


def measure_startup(pairs, options: VerifyOptions) -> dict[str, float]:
    """Fresh child vs pre-started child on the same baseline-free job (an evaluate of one candidate)."""
    candidate, task = pairs[0]
    compiled = build_extension(candidate.source, candidate.language, options.backend,
                               cache_dir=options.build_cache_dir)  # fmt: skip
    options = options.with_seeds()
    scratch = Path(tempfile.mkdtemp(prefix="ka-bench-fresh-"))
    job = build_job(task, candidate, compiled, options, "evaluate", scratch)
    _, fresh = run_child(job, scratch, options, options.timeout_s)
    cache_root = options.build_cache_dir
    with EvalPool(1, options.backend == "cuda", child_env(options), ro_binds=[cache_root, config.TASKS_DIR]) as pool:
        time.sleep(15)  # let the pre-started child finish its imports / CUDA init
        pooled = pool.take()
        job = build_job(task, candidate, compiled, options, "evaluate", pooled.scratch)
        _, warm = run_child(job, pooled.scratch, options, options.timeout_s, pooled=pooled)
    return {"eval fresh child: wall s": fresh.wall_s, "eval pre-started child: wall s": warm.wall_s,
            "start-up cost s (fresh - pre-started)": fresh.wall_s - warm.wall_s}  # fmt: skip


def measure_stream(pairs, options: VerifyOptions) -> dict[str, float]:
    started = time.monotonic()
    records = []
    for record in Verifier(options).stream(pairs):
        records.append(record)
        # A line per record: a run cut short still shows the rate it was reaching.
        print(f"  [{time.monotonic() - started:7.1f} s] {len(records):3d} {record.status}", flush=True)
    wall = time.monotonic() - started
    eval_s = [r.eval_s for r in records if r.eval_s is not None]
    statuses: dict[str, int] = {}
    for record in records:
        statuses[record.status] = statuses.get(record.status, 0) + 1
    print("  stream statuses:", statuses)
    return {"stream: kernels": len(records), "stream: wall s": wall,
            "device s/kernel (mean eval_s)": statistics.mean(eval_s) if eval_s else float("nan"),
            "verified kernels/hour": len(records) / wall * 3600}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=None, help="distinct kernels (default 48 cuda / 4 cpu)")
    parser.add_argument("--backend", choices=("cuda", "cpu"), default=None)
    args = parser.parse_args()
    backend = args.backend or ("cuda" if environment.gpu_count() else "cpu")
    count = args.kernels or (48 if backend == "cuda" else 4)
    work = Path(tempfile.mkdtemp(prefix="ka-bench-"))
    options = VerifyOptions(backend=backend, build_cache_dir=work / "builds", baseline_cache_dir=work / "baselines",
                            trials=config.DEFAULT_TRIALS)  # fmt: skip
    env = environment.environment_fields(backend)
    print(f"machine: {platform.node()} {os.cpu_count()} cores, {env['gpu_name']}, torch {env['torch_version']}, "
          f"cuda {env['cuda_version']}, nvcc {env['nvcc_version']}, isolation {resolve_isolation()}")  # fmt: skip
    print(f"backend {backend}, {count} kernels, compile workers {options.compile_workers}, "
          f"batch size {options.batch_size}")  # fmt: skip
    pairs = corpus(backend, count)
    # Each stage prints as it ends: a run cut short by a device time limit still reports what it measured.
    # The headline figure first: kernels/hour through the whole engine.
    show(measure_stream(corpus(backend, count), options))
    show(measure_startup(pairs, options))
    show(measure_compile(pairs[: min(len(pairs), options.batch_size)], options))


def show(figures: dict[str, float]) -> None:
    for name, value in figures.items():
        print(f"  {name:42s} {value:10.2f}", flush=True)


if __name__ == "__main__":
    main()
