"""Eager and torch.compile baselines, measured once per task per build (trusted parent side).

The measurement runs in a sandboxed child (mode "baseline", builder/verify/child/baselines.py); results are cached as
JSON per (task source, backend, device, torch version, size). A build starts each task's measurement early
(`prewarm`, parallel children): the child's set-up and torch.compile's build overlap the rest of the build, and
only its timing owns the device. Early, not first: a build's baselines wait for its first clean reference, which
the first evaluations need and which their set-ups (seconds of torch.compile on every core they may use) would
otherwise slow down.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import shutil
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from builder import config
from builder.tasks import Task
from builder.verify import environment, milestones
from builder.verify.engine import work_queues
from builder.verify.engine.children import build_job, run_in_turn
from builder.verify.judge import verdict
from builder.verify.protocol.words import read_result
from builder.verify.sandbox.process import SandboxCancelled

if TYPE_CHECKING:
    from builder.verify.options import VerifyOptions

log = logging.getLogger(__name__)


class BaselineCache:
    """Eager and torch.compile timings, measured by the child in mode "baseline" once per
    (task source, backend, device, torch version, size) and kept as JSON files."""

    def __init__(self, directory: Path | None) -> None:
        # Absolute: the directory is bound into sandboxes whose cwd is a scratch dir.
        self.directory = (Path(directory) if directory else config.CACHE_DIR / "baselines").resolve()
        self._lock = threading.Lock()
        self._failed: set[str] = set()  # keys whose baseline failed in this build: not retried per candidate
        self._warming: dict[str, Future] = {}
        self._needed: dict[str, threading.Event] = {}  # set once a kernel waits for an early measurement
        self._refreshed: set[str] = set()  # keys measured again in this build
        self._key_locks: dict[str, threading.Lock] = {}
        self.children_s: list[float] = []  # wall seconds of each baseline child run (the throughput benchmark)

    def _compiler_cache(self) -> tuple[dict[str, str], list[Path]]:
        """inductor/triton caches shared by this build's baseline children (reference code only: candidate
        children never get this writable directory, so a candidate cannot poison a baseline)."""
        root = self.directory / "compiler-cache"
        (root / "inductor").mkdir(parents=True, exist_ok=True)
        (root / "triton").mkdir(parents=True, exist_ok=True)
        env = {"TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"), "TRITON_CACHE_DIR": str(root / "triton"),
               "TORCHINDUCTOR_COMPILE_THREADS": str(config.BASELINE_COMPILE_THREADS)}  # fmt: skip
        return env, [root]

    def prewarm(self, task: Task, options: VerifyOptions, executor: ThreadPoolExecutor,
                cancel: threading.Event | None = None, after: threading.Event | None = None) -> None:  # fmt: skip
        """Measure the task's baseline early, in a parallel child, rather than when its first correct kernel asks
        (its torch.compile build then overlaps compiles and evaluations; only its timing owns the device, and
        only while no kernel wants the device, until one waits for this baseline), once `after` is set (the
        build's first clean reference ended). CUDA only: on the CPU backend the build would
        take the cores the candidates' own builds and timing need, for tasks that may never have a correct
        kernel."""
        if options.backend != "cuda":
            return
        key = self.key(task, options)
        with self._lock:
            if key in self._warming or (self.directory / f"{key}.json").exists():
                return
            needed = self._needed[key] = threading.Event()
            self._warming[key] = executor.submit(self._measure_early, task, options, cancel, after, needed)

    def _measure_early(self, task: Task, options: VerifyOptions, cancel: threading.Event | None,
                       after: threading.Event | None = None, needed: threading.Event | None = None) -> None:  # fmt: skip
        while after is not None and not after.wait(0.1):
            if cancel is not None and cancel.is_set():
                return  # the build is stopping before its first reference: a later build measures it
        try:
            self._measure(task, options, cancel=cancel, needed=needed)
        except SandboxCancelled:
            pass  # the build is stopping; a later build measures it
        except Exception as exc:  # noqa: BLE001 - an early start is an optimisation; get() reports failures
            log.warning("baseline of task %s, measured early, failed: %s", task.id, exc)

    def key(self, task: Task, options: VerifyOptions) -> str:
        env = environment.environment_fields(options.backend, options.device_index)
        size = "full" if options.backend == "cuda" else "cpu"
        material = json.dumps([task.source, options.backend, env["gpu_name"], env["torch_version"], size])
        return f"{task.level}_{task.number}_{hashlib.sha256(material.encode()).hexdigest()[:24]}"

    def get(self, task: Task, options: VerifyOptions, refresh: bool = False) -> dict[str, Any] | None:
        """The task's baseline, measured on first use (or by `prewarm`). `refresh`: measure again, once per task
        per build (an evaluation found the machine's eager speed moved away from the cached figure)."""
        key = self.key(task, options)
        warming = self._warming.get(key)
        # An early measurement still queued is taken out and made here at once: a build of many tasks queues
        # every task's at its start, and a kernel waits for its own task's baseline, not for those ahead of it.
        # One under way is needed now: its turn on the device no longer gives way to the kernels' checks.
        if warming is not None and not warming.cancel():
            self._needed[key].set()
            warming.result()  # its exceptions are its own (`_measure_early`)
        return self._measure(task, options, refresh=refresh)

    def _measure(self, task: Task, options: VerifyOptions, refresh: bool = False, cancel: threading.Event | None = None,
                 needed: threading.Event | None = None) -> dict[str, Any] | None:  # fmt: skip
        """`needed`: given, measured ahead of need, its timing giving way to the kernels' use of the device until this is set
        (`DeviceGate.acquire_exclusive`)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        key = self.key(task, options)
        path = self.directory / f"{key}.json"
        with self._lock:
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        # A thread lock per task for the workers of one Verifier (tasks measure side by side), a file lock for
        # parallel builder processes.
        with key_lock, open(self.directory / f"{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            cached = read_result(path)
            if refresh and key not in self._refreshed:
                self._refreshed.add(key)
                cached = None
            if cached is not None or key in self._failed:
                return cached
            scratch = Path(tempfile.mkdtemp(prefix=config.SCRATCH_PREFIXES["baseline"]))
            try:
                job = build_job(task, None, None, options, "baseline", scratch)
                env, writable = self._compiler_cache()
                # Set-up and torch.compile's build run beside checks, and stopped while another window owns the
                # device (their first calls run on it); the timing owns the device. PyTorch is timed with the
                # driver's work queues, as users run it (work_queues.py).
                result, outcome = run_in_turn(job, scratch, work_queues.driver_default(options),
                                              config.BASELINE_TIMEOUT_S, "baseline",
                                              exclusive=True, member_while_setting_up=True, needed=needed,
                                              env_extra=env, writable=writable, cancel=cancel)  # fmt: skip
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            self.children_s.append(outcome.wall_s)
            milestones.mark("first_baseline_child_ended")
            if result is None or verdict.speedup(result.get("eager_ms"), 1.0) is None:
                reason = (result or {}).get("error") or outcome.stderr_tail.strip().splitlines()[-3:]
                log.warning("baseline of task %s failed (%s): %s", task.id, outcome.describe(), reason)
                self._failed.add(key)
                return None
            keep = ("eager_ms", "compile_ms", "timing_method", "eager_runtime", "compile_runtime", "compile_error",
                    "compile_threads")  # fmt: skip
            baseline = {k: result.get(k) for k in keep}
            temporary = path.with_name(f".{path.name}.tmp")
            temporary.write_text(json.dumps(baseline))
            temporary.replace(path)
            return baseline


def eager_disagrees(result: dict[str, Any], baseline: dict[str, Any] | None) -> bool:
    """Whether the eager timed in the candidate's window and the clean process's cached eager differ by more
    than config.EAGER_CROSSCHECK_TOLERANCE: the machine changed since the baseline was cached."""
    window = result.get("eager_window") if isinstance(result.get("eager_window"), dict) else {}
    in_window, clean = window.get("median_ms"), (baseline or {}).get("eager_ms")
    if not isinstance(in_window, (int, float)) or not isinstance(clean, (int, float)) or clean <= 0:
        return False
    return abs(in_window / clean - 1.0) > config.EAGER_CROSSCHECK_TOLERANCE


def eager_slowed_reason(result: dict[str, Any], baseline: dict[str, Any] | None, backend: str = "cuda") -> str | None:
    """Why eager timed in the candidate's window cannot be the speedup's basis: both its median and its fastest call
    were slower than the clean process's (measured again where the two first disagreed) by more than
    config.EAGER_SLOWED_TOLERANCE. A candidate's process can slow every eager call in it (a global RecordFunction
    callback, a busy thread), which moves both; load from other processes comes and goes, and moves the clean
    process's figures too or leaves the fastest calls alone."""
    window = result.get("eager_window") if isinstance(result.get("eager_window"), dict) else {}
    clean = (baseline or {}).get("eager_runtime")
    clean = clean if isinstance(clean, dict) else {"median_ms": (baseline or {}).get("eager_ms")}
    tolerance = config.EAGER_SLOWED_TOLERANCE[backend]
    ratios = []
    for stat in ("median_ms", "min_ms"):
        mine, theirs = window.get(stat), clean.get(stat, clean.get("median_ms"))
        if not isinstance(mine, (int, float)) or not isinstance(theirs, (int, float)) or theirs <= 0:
            return None
        ratios.append(mine / theirs)
    if min(ratios) - 1.0 <= tolerance:
        return None
    return (
        f"PyTorch eager took {window['median_ms']:.4g} ms a call (fastest {window['min_ms']:.4g} ms) in the "
        f"candidate's process and {clean.get('median_ms'):.4g} ms (fastest {clean.get('min_ms', clean.get('median_ms')):.4g} ms) "
        f"in a clean one: more than {tolerance:.0%} slower"
    )


def held_to_clean_eager(result: dict[str, Any], baseline: dict[str, Any] | None) -> dict[str, Any]:
    """The speedup's eager is the window's median, but never more than config.EAGER_CROSSCHECK_TOLERANCE above the
    clean process's (measured again where the two first disagreed by that much), on either backend. Slowing eager
    in the candidate's process, in any share of its calls and by any amount short of the slowed rule
    (`eager_slowed_reason`, which asks the fastest call to be slowed as well), then moves the speedup by at most
    that much. A window whose every call ran slow for reasons of its own (load on a launch-bound eager of a few
    microseconds, eager's threads waiting for cores) gets the smaller, clean-based speedup; `eager_window`'s
    measured median stays as it was, and the timing method says which figure the speedup rests on."""
    window = result.get("eager_window") if isinstance(result.get("eager_window"), dict) else {}
    median, clean = window.get("median_ms"), (baseline or {}).get("eager_ms")
    if not isinstance(median, (int, float)) or not isinstance(clean, (int, float)) or clean <= 0:
        return result
    ceiling = clean * (1.0 + config.EAGER_CROSSCHECK_TOLERANCE)
    if median <= ceiling:
        return result
    told = (f"; {config.EAGER_HELD_CLAUSE}, {median:.4g} ms a call, was more than "
            f"{config.EAGER_CROSSCHECK_TOLERANCE:.0%} above a clean process's {clean:.4g} ms: the speedup rests on "
            f"{ceiling:.4g} ms")  # fmt: skip
    return {**result, "eager_window": {**window, "basis_ms": ceiling},
            "timing_method": f"{result.get('timing_method') or ''}{told}"}  # fmt: skip


def weigh_slowed_eager(result: dict[str, Any], slowed: str, backend: str) -> tuple[dict[str, Any], str, str | None]:
    """(result, status, error) once in-window eager was found slowed. CUDA, where a window owns the device:
    `slowed_baseline`, disqualifying (found in two evaluations: `one_kernel.finish_record`). CPU, where torch's
    eager threads on a loaded machine can wait for cores for milliseconds: the speedup rests on the clean process's
    eager instead, and the timing method says so."""
    if backend == "cuda":
        flags = sorted({*result.get("flags", []), "slowed_baseline"})
        return {**result, "flags": flags, "status": "incorrect"}, "incorrect", f"slowed_baseline: {slowed}"
    method = (
        f"{result.get('timing_method') or ''}; speedup against a clean process's eager, not this window's: {slowed}"
    )
    kept = {k: v for k, v in result.items() if k not in ("eager_window", "speedup_blocks")}
    return {**kept, "timing_method": method}, str(result.get("status")), result.get("error")
