"""Eager and torch.compile baselines, measured once per task per build (trusted parent side).

The measurement runs in a sandboxed child (mode "baseline", builder/verify/baselines.py); results are cached as
JSON per (task source, backend, device, torch version, size). CUDA builds also pre-compile each task's
torch.compile baseline in parallel children so the measured run finds inductor's caches warm.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import shutil
import tempfile
import threading
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from builder import config
from builder.tasks import Task
from builder.verify import environment, verdict
from builder.verify.device_gate import Exclusive, device_gate
from builder.verify.pool import build_job, read_result, run_child
from builder.verify.sandbox import SandboxCancelled

if TYPE_CHECKING:
    from builder.verify.engine import VerifyOptions

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
        self._refreshed: set[str] = set()  # keys measured again in this build

    def _compiler_cache(self) -> tuple[dict[str, str], list[Path]]:
        """inductor/triton caches shared by this build's baseline children (reference code only: candidate
        children never get this writable directory, so a candidate cannot poison a baseline)."""
        root = self.directory / "compiler-cache"
        (root / "inductor").mkdir(parents=True, exist_ok=True)
        (root / "triton").mkdir(parents=True, exist_ok=True)
        env = {"TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"), "TRITON_CACHE_DIR": str(root / "triton")}
        return env, [root]

    def prewarm(
        self, task: Task, options: VerifyOptions, executor: ThreadPoolExecutor, cancel: threading.Event | None = None
    ) -> None:
        """Compile the task's torch.compile baseline in a parallel child (no timing), so that the measured
        baseline, run later on the evaluation worker, finds inductor's caches warm. The serial
        torch.compile cost per task otherwise dominates a GPU build."""
        if options.backend != "cuda":
            return
        key = self.key(task, options)
        with self._lock:
            if key in self._warming or (self.directory / f"{key}.json").exists():
                return
            self._warming[key] = executor.submit(self._warm, task, options, cancel)

    def _warm(self, task: Task, options: VerifyOptions, cancel: threading.Event | None = None) -> None:
        scratch = Path(tempfile.mkdtemp(prefix="ka-warm-"))
        try:
            job = build_job(task, None, None, options, "baseline", scratch)
            job["warm_only"] = True
            env, writable = self._compiler_cache()
            run_child(job, scratch, options, config.BASELINE_TIMEOUT_S, env_extra=env, writable=writable, cancel=cancel)
        except SandboxCancelled:
            pass  # the build is stopping; the measured run (a later build) warms it again
        except Exception as exc:  # noqa: BLE001 - warming is an optimisation; the measured run reports failures
            log.warning("baseline warm-up of task %s failed: %s", task.id, exc)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def key(self, task: Task, options: VerifyOptions) -> str:
        env = environment.environment_fields(options.backend, options.device_index)
        size = "full" if options.backend == "cuda" else "cpu"
        material = json.dumps([task.source, options.backend, env["gpu_name"], env["torch_version"], size])
        return f"{task.level}_{task.number}_{hashlib.sha256(material.encode()).hexdigest()[:24]}"

    def get(self, task: Task, options: VerifyOptions, refresh: bool = False) -> dict[str, Any] | None:
        """The task's baseline, measured on first use. `refresh`: measure again, once per task per build (an
        evaluation found the machine's eager speed moved away from the cached figure)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        key = self.key(task, options)
        path = self.directory / f"{key}.json"
        warming = self._warming.get(key)
        if warming is not None:
            try:
                warming.result()
            except CancelledError:
                pass
        # Thread lock for the workers of one Verifier, file lock for parallel builder processes.
        with self._lock, open(self.directory / f"{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            cached = read_result(path)
            if refresh and key not in self._refreshed:
                self._refreshed.add(key)
                cached = None
            if cached is not None or key in self._failed:
                return cached
            scratch = Path(tempfile.mkdtemp(prefix="ka-baseline-"))
            try:
                job = build_job(task, None, None, options, "baseline", scratch)
                env, writable = self._compiler_cache()
                with Exclusive(device_gate(options.backend, options.device_index), "baseline"):  # it times
                    result, outcome = run_child(job, scratch, options, config.BASELINE_TIMEOUT_S, env_extra=env,
                                                writable=writable)  # fmt: skip
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            if result is None or verdict.speedup(result.get("eager_ms"), 1.0) is None:
                reason = (result or {}).get("error") or outcome.stderr_tail.strip().splitlines()[-3:]
                log.warning("baseline of task %s failed (%s): %s", task.id, outcome.describe(), reason)
                self._failed.add(key)
                return None
            keep = ("eager_ms", "compile_ms", "timing_method", "eager_runtime", "compile_runtime", "compile_error")
            baseline = {k: result.get(k) for k in keep}
            temporary = path.with_name(f".{path.name}.tmp")
            temporary.write_text(json.dumps(baseline))
            temporary.replace(path)
            return baseline
