"""`VerifyOptions`: how a verification runs (trusted parent side)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, replace
from pathlib import Path

from builder import config
from builder.verify.protocol.entry_points import CHILD_MODULE


@dataclass
class VerifyOptions:
    backend: str = "cpu"
    timeout_s: float = config.RUN_TIMEOUT_S
    compile_timeout_s: float = config.COMPILE_TIMEOUT_S
    atol: float | None = None  # None: the task's tolerance (per dtype, or the task's TOLERANCE)
    rtol: float | None = None
    trials: int = config.DEFAULT_TRIALS
    seeds: list[int] | None = None  # None: drawn from `secrets` per build (per Verifier / verify call)
    profile: bool = False
    timed_calls: int = config.TIMED_CALLS
    warmup_calls: int = config.WARMUP_CALLS
    timing_budget_s: float = config.TIMING_BUDGET_S
    device_index: int = 0
    baseline_cache_dir: Path | None = None  # None: config.CACHE_DIR / "baselines"
    build_cache_dir: Path | None = None  # None: config.CACHE_DIR / "compile"
    fast_math: bool = False
    isolation: str | None = None  # None: bwrap when usable, else process
    compile_workers: int | None = None  # None: the config's rule for the stream's cores and GPUs
    batch_size: int = config.COMPILE_BATCH_SIZE
    first_batch_size: int = config.COMPILE_FIRST_BATCH_SIZE  # a stream's first builds ramp up from it
    urgent_builds: int | None = None  # its first window's first builds that are urgent; None: the config's rule
    prestart: int = config.EVAL_POOL_SIZE  # pre-started evaluation children per worker in stream()
    eval_workers: int | None = None  # evaluation workers per device in stream(); None: config's for the backend
    engines: int | None = None  # engine processes in stream(): None, one per GPU when several (1: this one only)
    disk_share: float = 1.0  # of the scratch disk's room for this stream (an engine among N: 1/N)
    child_module: str = CHILD_MODULE  # the untrusted-side entry point (tests point it at a fake)
    fork_children: bool | None = None  # evaluation children forked from a zygote in stream(); None: config's
    fork_references: bool | None = None  # clean reference children forked from the zygote; None: config's
    refill_after_first_reference: bool | None = None  # EvalPool(refill_after=...) in stream(); None: config's
    device_reserve_bytes: int | None = None  # evaluation children's block taken before the job; None: config's
    device_connections: int | None = None  # candidates' CUDA work queues (work_queues.py); None: config's; 0: driver's
    suspects_are_own: bool = False  # a failure that looks like the machinery's is recorded as the candidate's
    # (set for the control kernel itself, whose failures are the question: infrastructure.py)
    first_in_line: bool = False  # its timing window goes before every other waiting one (the control kernel's)

    def __post_init__(self) -> None:
        if self.backend not in ("cuda", "cpu"):
            raise ValueError(f"backend must be cuda or cpu, not {self.backend!r}")

    def workers_per_device(self) -> int:
        """Evaluation workers per device in a stream: `eval_workers`, or the config's for the backend (a `Verifier`
        fixes them for its cores and GPUs first: `with_workers_for`)."""
        default = config.EVAL_WORKERS_PER_GPU if self.backend == "cuda" else config.EVAL_WORKERS_CPU
        return max(1, self.eval_workers if self.eval_workers is not None else default)

    def with_workers_for(self, cores: int, gpus: int, gpu_gib: float | None = None) -> VerifyOptions:
        """These options with compile and evaluation workers, and the first window's urgent builds, fixed: the given
        ones, or the config's rules for a stream that may run on `cores` cores and evaluates on `gpus` GPUs of
        `gpu_gib` GiB each (`config.compile_workers_for`, `config.eval_workers_for`, `config.urgent_builds_for`)."""
        compile_workers = self.compile_workers or config.compile_workers_for(cores, gpus)
        eval_workers = self.eval_workers
        if eval_workers is None:
            eval_workers = config.eval_workers_for(cores, gpus if self.backend == "cuda" else 0, gpu_gib)
        urgent_builds = self.urgent_builds
        if urgent_builds is None:
            urgent_builds = config.urgent_builds_for(gpus if self.backend == "cuda" else 0)
        return replace(self, compile_workers=compile_workers, eval_workers=eval_workers, urgent_builds=urgent_builds)

    def with_seeds(self) -> VerifyOptions:
        """These options with seeds fixed: the given ones, or `trials` fresh secret ones."""
        if self.seeds:
            return self
        return replace(self, seeds=[secrets.randbits(config.SEED_BITS) for _ in range(max(1, self.trials))])
