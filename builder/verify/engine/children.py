"""One child run for a job (trusted parent side): the job file in, the result file out (contract in
docs/architecture.md). A child is taken from a pool, forked from the zygote or exec'd in a sandbox of its own; one
that uses the device asks for its turn (`run_in_turn`)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from builder import config
from builder.verify import environment
from builder.verify.engine import work_queues
from builder.verify.engine.device_gate import DeviceTurn, device_gate
from builder.verify.protocol.output_digest import arch_digits
from builder.verify.protocol.words import read_result
from builder.verify.sandbox.forked import ForkedProcess, ForkFailed, give_up, release_zygote, running_zygote
from builder.verify.sandbox.pool import PooledChild, child_argv
from builder.verify.sandbox.process import ChildOutcome, SandboxedProcess, resolve_isolation, run_sandboxed

if TYPE_CHECKING:
    from builder.candidates import Candidate
    from builder.tasks import Task
    from builder.verify.compile.extension import CompileResult
    from builder.verify.options import VerifyOptions


def child_env(options: VerifyOptions) -> dict[str, str]:
    if options.backend != "cuda":
        return {"CUDA_VISIBLE_DEVICES": ""}
    visible = environment.visible_gpu_ids()
    device = visible[options.device_index] if options.device_index < len(visible) else str(options.device_index)
    env = {"CUDA_VISIBLE_DEVICES": device}  # the child sees its GPU as cuda:0
    if arch := arch_digits(environment.gpu_arch(options.device_index)):  # output_digest.compile_kernel_apart's target
        env[config.DIGEST_KERNEL_ARCH_ENV] = arch
    if options.device_reserve_bytes is not None:  # an evaluation child's block (child.device_reserve_bytes)
        env[config.EVAL_DEVICE_RESERVE_ENV] = str(options.device_reserve_bytes)
    if work_queues.queues(options):  # read by the driver when the child makes its context
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = str(work_queues.queues(options))
    return env


def build_job(task: Task, candidate: Candidate | None, compiled: CompileResult | None, options: VerifyOptions,
         mode: str, scratch: Path) -> dict[str, Any]:  # fmt: skip
    atol, rtol = task.tolerances()
    job: dict[str, Any] = {
        "mode": mode,
        "task_path": str(task.path),
        "task_size": "full" if options.backend == "cuda" else "cpu",
        "backend": options.backend,
        "language": candidate.language if candidate else None,
        "library_path": compiled.library_path if compiled else None,
        "module_name": compiled.module_name if compiled else None,
        "symbol": compiled.symbol if compiled else "forward",
        "python_path": None,
        "seeds": list(options.seeds or []),
        "atol": options.atol if options.atol is not None else atol,
        "rtol": options.rtol if options.rtol is not None else rtol,
        "trials": len(options.seeds or []) or options.trials,
        "timed_calls": options.timed_calls,
        "warmup_calls": options.warmup_calls,
        "timing_budget_s": options.timing_budget_s,
        "profile": options.profile,
        "result_path": str(scratch / "result.json"),
    }
    if candidate is not None and candidate.language == "python":
        python_path = scratch / "candidate_model.py"
        python_path.write_text(candidate.source)
        job["python_path"] = str(python_path)
    return job


def job_inputs(job: dict[str, Any]) -> list[Path]:
    """Directories a job reads from (the task file's, the built library's)."""
    return [Path(job[key]).parent for key in ("task_path", "library_path") if job.get(key)]


def run_child(job: dict[str, Any], scratch: Path, options: VerifyOptions, timeout_s: float,
              pooled: PooledChild | None = None, argv_prefix: list[str] | None = None,
              env_extra: dict[str, str] | None = None, writable: list[Path] | None = None,
              cancel: threading.Event | None = None,
              on_start: Callable[[SandboxedProcess], None] | None = None, fork: bool = False,
              ) -> tuple[dict[str, Any] | None, ChildOutcome]:  # fmt: skip
    """Write the job into the scratch dir, run the child (pooled, forked or exec'd), read its result
    (SandboxCancelled once `cancel` is set). `on_start` gets the child's process before it reads the job. `fork`:
    a fresh child forked from the evaluation children's zygote where one is up now (`fork_fresh`)."""
    job_path = scratch / "job.json"
    job_path.write_text(json.dumps({**job, "handed_over_at": time.time()}))  # the child's wait_for_start_up
    forked = None
    if fork and pooled is None and not env_extra and not argv_prefix:
        forked = fork_fresh(job, scratch, options, writable or ())
        pooled = PooledChild(scratch, forked) if forked is not None else None
    try:
        return _run_child(job, job_path, scratch, options, timeout_s, pooled, argv_prefix, env_extra, writable,
                          cancel, on_start)  # fmt: skip
    finally:
        if forked is not None:  # the zygote's user until its child has ended
            release_zygote(options.child_module, child_env(options))


def _run_child(job: dict[str, Any], job_path: Path, scratch: Path, options: VerifyOptions, timeout_s: float,
               pooled: PooledChild | None, argv_prefix: list[str] | None, env_extra: dict[str, str] | None,
               writable: list[Path] | None, cancel: threading.Event | None,
               on_start: Callable[[SandboxedProcess], None] | None) -> tuple[dict[str, Any] | None, ChildOutcome]:  # fmt: skip
    if pooled is not None and not pooled.process.alive():
        # A pre-started child that died before its job (start-up failure) says nothing about this
        # candidate: run the job in a fresh child instead.
        pooled.process.wait(0)
        pooled = None
    if pooled is not None:
        pooled.process.restart_clock()
        hold_clock_until_started(pooled)
        if on_start is not None:
            on_start(pooled.process)
        pooled.process.send(str(job_path))
        outcome = pooled.process.wait(timeout_s, cancel)
    else:
        outcome = run_sandboxed(
            [*(argv_prefix or []), *child_argv(str(job_path), options.child_module)],
            scratch,
            timeout_s,
            gpu=options.backend == "cuda",
            env_extra={**child_env(options), **(env_extra or {})},
            extra_binds=writable or (),
            isolation=options.isolation,
            ro_binds=job_inputs(job),
            cancel=cancel,
            on_start=on_start,
        )
    return read_result(Path(job["result_path"])), outcome


def hold_clock_until_started(pooled: PooledChild) -> None:
    """A pre-started child whose start-up (torch's import, its CUDA context) has not ended when its job comes: its
    clock stands still until the child says it has (`config.POOLED_CHILD_READY_NAME`), dies, or
    `POOLED_CHILD_READY_WAIT_S` pass. Otherwise a loaded or small machine would turn a quick candidate's verdict
    into a timeout, and a slow one's timeout would depend on how soon the worker took its child."""
    marker = pooled.scratch / config.POOLED_CHILD_READY_NAME
    if marker.exists():
        return
    process = pooled.process
    process.hold_clock()

    def release_once_started() -> None:
        deadline = time.monotonic() + config.POOLED_CHILD_READY_WAIT_S
        try:
            while not marker.exists() and process.alive() and time.monotonic() < deadline:
                time.sleep(config.JUDGE_POLL_MAX_S)
        finally:
            process.release_clock()

    threading.Thread(target=release_once_started, daemon=True, name="ka-child-start").start()


def fork_fresh(job: dict[str, Any], scratch: Path, options: VerifyOptions,
               writable: Sequence[Path]) -> SandboxedProcess | None:  # fmt: skip
    """A child forked into a sandbox of its own (the binds an exec'd one would get) from the zygote that the
    evaluation children of these options fork from, if one is up now; else None (exec one). The caller gives the
    zygote back (`release_zygote`) once the child has ended. A zygote never runs candidate code and each child sees
    only its own sandbox: a clean reference forked from it is as clean as an exec'd one, without importing torch
    again (seconds of a core each, at a build's start, beside the zygote's own imports)."""
    forks = config.FORK_EVALUATION_CHILDREN if options.fork_children is None else options.fork_children
    if not forks or resolve_isolation(options.isolation) != "bwrap":
        return None
    env = child_env(options)
    zygote = running_zygote(options.child_module, env)
    if zygote is None:
        return None
    try:
        return ForkedProcess(zygote, scratch, options.backend == "cuda", env, job_inputs(job), writable)
    except ForkFailed as exc:
        give_up(zygote, str(exc))  # as a pool does: later children are exec'd
        return None


def run_in_turn(job: dict[str, Any], scratch: Path, options: VerifyOptions, timeout_s: float, purpose: str,
                exclusive: bool, member_while_setting_up: bool = False, ends_turn_itself: bool = False,
                needed: threading.Event | None = None, **run_kwargs: Any) -> tuple[dict[str, Any] | None, ChildOutcome]:  # fmt: skip
    """`run_child` for a child (reference, baseline, ncu) that asks for its turn on the device once set up:
    its start-up runs beside anything, its device work in a shared or an exclusive hold (`device_gate`); a
    set-up that uses the device is stopped while another owns it (`member_while_setting_up`). A child that
    `ends_turn_itself` (Nsight Compute's: it loads the candidate in its turn) is a member from its turn to its exit
    and writes job["turn_done_path"] once its device work is over (`DeviceTurn`'s `done`). `needed`: given, its
    exclusive turn is ahead of need, and gives way to every other use of the device until it is set."""
    job["ready_path"], job["go_path"] = str(scratch / "ready"), str(scratch / "go")
    done = scratch / "turn_done" if ends_turn_itself else None
    if done is not None:
        job["turn_done_path"] = str(done)
    gate = device_gate(options.backend, options.device_index)
    turn = DeviceTurn(gate, Path(job["ready_path"]), Path(job["go_path"]), purpose, exclusive=exclusive,
                      member_while_setting_up=member_while_setting_up, done=done, needed=needed)  # fmt: skip
    try:
        return run_child(job, scratch, options, timeout_s, on_start=turn.attach, **run_kwargs)
    finally:
        turn.finish()
