"""Figures the throughput bench measures apart from a stream: the same candidates compiled in shared builds and one
by one (`measure_compile`), and a fresh evaluation child against a pre-started one (`measure_startup`)."""

from __future__ import annotations

import tempfile
import time
from dataclasses import replace
from pathlib import Path

from builder import config
from builder.verify.compile import batching
from builder.verify.compile.extension import CompileResult, build_extension
from builder.verify.engine.children import build_job, child_env, run_child
from builder.verify.options import VerifyOptions
from builder.verify.sandbox.pool import EvalPool


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
