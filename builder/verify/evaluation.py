"""One candidate's evaluation: clean reference, candidate child, judgement (trusted parent side).

1. `ReferenceCache.get` runs the clean reference child (mode "reference") once per task, seed set and
   tolerance; its output files stay in a directory private to the parent (never bound into a candidate's
   sandbox), and every candidate of the task is judged against them.
2. `run_judged` runs the candidate's child (mode "evaluate"). Once it has loaded the task it says "ready" and
   waits for its checks to be granted a shared hold on the device (`device_gate`); it writes the candidate's
   outputs and waits again; a watcher thread here judges them at once (`judge.find_checks`) and answers "time"
   (once the device is owned for the window) or "stop", so the timing budget is spent only on kernels that
   passed. After the child exits, those findings are weighed with the child's own claims and flags
   (`judge.apply_findings`: no output is compared twice), and the first output of each timed input set is
   judged against its clean reference.

No file written by a child is trusted: each is read as safetensors with a size bound, one output at a time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from builder import config
from builder.tasks import Task
from builder.verify import environment, judge, milestones, tensor_files
from builder.verify.device_gate import DeviceGate, device_gate, write_word, yield_words
from builder.verify.pool import PooledChild, build_job, run_child, run_in_turn
from builder.verify.reference import public_manifest
from builder.verify.sandbox import ChildOutcome, SandboxCancelled, SandboxedProcess

if TYPE_CHECKING:
    from builder.verify.engine import VerifyOptions

log = logging.getLogger(__name__)


@dataclass
class CleanReference:
    """The clean reference child's outputs (unpacked, CPU) and manifest, or why there are none."""

    outputs: Any = None  # tensor_files.OutputsDir (or a dict of unpacked values)
    manifest: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    origin: str = "task"  # who failed: the task's code, or the child (crash, timeout)
    compute_s: float = 0.0
    owner: Any = field(default=None, repr=False)  # the cache whose directory holds the files: kept alive with them

    def public_manifest(self) -> dict[str, Any]:
        return public_manifest(self.manifest)

    def file_limit(self) -> int:
        """The most bytes one of a candidate's output files may hold: one call's outputs, with room to spare."""
        per_call = sum(int(n) for n in self.manifest.get("output_bytes") or [])
        return 2 * per_call + config.OUTPUTS_FILE_SLACK_BYTES


class ReferenceCache:
    """Clean references of the tasks in use, computed once each (per build: the seeds are the build's)."""

    def __init__(self, capacity: int = config.REFERENCE_CACHE_TASKS) -> None:
        self.capacity = capacity
        # Private to this process: never bound into a candidate's sandbox.
        self.root = Path(tempfile.mkdtemp(prefix="ka-references-"))
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(self.root), True)
        self._entries: OrderedDict[str, CleanReference] = OrderedDict()
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self.computed = 0
        self.compute_s = 0.0  # wall seconds of the reference children run so far
        self.ready_at: list[float] = []  # time.monotonic() as each was ready (the bench's view of a start)
        self.first_ended = threading.Event()  # set once a reference child has ended, ready or failed
        self._warming: set[str] = set()

    @staticmethod
    def key(task: Task, options: VerifyOptions) -> str:
        atol, rtol = task.tolerances()
        env = environment.environment_fields(options.backend, options.device_index)
        material = [task.source, options.backend, env["gpu_name"], env["torch_version"], list(options.seeds or []),
                    options.atol if options.atol is not None else atol,
                    options.rtol if options.rtol is not None else rtol, options.trials]  # fmt: skip
        return hashlib.sha256(json.dumps(material).encode()).hexdigest()

    def get(self, task: Task, options: VerifyOptions, cancel: threading.Event | None = None) -> CleanReference:
        key = self.key(task, options)
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:  # one computation per task, while other tasks' candidates go on
            with self._lock:
                if key in self._entries:
                    self._entries.move_to_end(key)
                    return self._entries[key]
            directory = self.root / key[:24]
            try:
                reference = compute_clean_reference(task, options, directory, cancel)
            finally:
                self.first_ended.set()
            weakref.finalize(reference, shutil.rmtree, str(directory), True)  # the files live as long as it does
            reference.owner = self
            self.computed += 1
            self.compute_s += reference.compute_s
            self.ready_at.append(time.monotonic())
            milestones.mark("first_reference_ready")
            with self._lock:
                self._entries[key] = reference
                while len(self._entries) > self.capacity:
                    # Dropped here; its files go once no evaluation holds it any more.
                    self._entries.popitem(last=False)
            return reference

    def prewarm(self, task: Task, options: VerifyOptions, executor: Any, cancel: threading.Event | None = None) -> None:
        """Compute the task's reference now, in a parallel child, rather than when its first candidate reaches
        an evaluation worker (which would wait for it): a build's first compiles leave the device idle. Only
        while the cache has room, so nothing computed early is dropped before it is used."""
        key = self.key(task, options)
        with self._lock:
            if key in self._entries or key in self._warming or len(self._entries) + len(self._warming) >= self.capacity:
                return
            self._warming.add(key)
        executor.submit(self._warm, task, options, key, cancel)

    def _warm(self, task: Task, options: VerifyOptions, key: str, cancel: threading.Event | None) -> None:
        try:
            self.get(task, options, cancel)
        except SandboxCancelled:
            pass  # the build is stopping
        except Exception as exc:  # noqa: BLE001 - an early start is an optimisation; get() reports failures
            log.warning("reference of task %s, computed early, failed: %s", task.id, exc)
        finally:
            with self._lock:
                self._warming.discard(key)

    def close(self) -> None:
        self._finalizer()


_process_cache: ReferenceCache | None = None
_process_cache_lock = threading.Lock()


def process_reference_cache() -> ReferenceCache:
    """One cache for callers that bring none (the CLI's verify, a Ray worker's evaluations): a worker that
    evaluates many candidates of a task computes its clean reference once (the key holds the seeds)."""
    global _process_cache
    with _process_cache_lock:
        if _process_cache is None:
            _process_cache = ReferenceCache()
        return _process_cache


def compute_clean_reference(task: Task, options: VerifyOptions, directory: Path,
                            cancel: threading.Event | None = None) -> CleanReference:  # fmt: skip
    """Run the reference child (the task only, never candidate code); its outputs stay in `directory`. Setting
    `cancel` kills it (SandboxCancelled: nothing is kept)."""
    scratch = Path(tempfile.mkdtemp(prefix=config.SCRATCH_PREFIXES["reference"]))
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    try:
        job = build_job(task, None, None, options, "reference", scratch)
        job["outputs_dir"] = str(directory)
        # Its GPU work shares the device with checks, never with a timing window.
        fork = config.FORK_REFERENCE_CHILDREN if options.fork_references is None else options.fork_references
        result, outcome = run_in_turn(job, scratch, options, config.REFERENCE_TIMEOUT_S, "reference", exclusive=False,
                                      writable=[directory], cancel=cancel, fork=fork)  # fmt: skip
        if result is None or not isinstance(result.get("manifest"), dict):
            if outcome.timed_out:
                how = f"timed out after {config.REFERENCE_TIMEOUT_S:g} s"
            elif result is None:
                how = f"ended without a result ({outcome.describe()})"
            else:
                how = f"failed: {result.get('error')}"
            tail = outcome.stderr_tail.strip()[-1000:]
            error = f"the reference child {how}" + (f"; stderr tail:\n{tail}" if tail else "")
            return CleanReference(error=error, origin="child", compute_s=outcome.wall_s)
        manifest = result["manifest"]
        if result.get("status") != "correct":
            return CleanReference(manifest=manifest, error=str(result.get("error")), compute_s=outcome.wall_s)
        outputs = tensor_files.OutputsDir(directory, config.REFERENCE_FILE_MAX_BYTES, keep_loaded=False)
        return CleanReference(outputs=outputs, manifest=manifest, compute_s=outcome.wall_s)
    except tensor_files.OutputFileError as exc:
        return CleanReference(error=f"the reference child's outputs: {exc}", origin="child")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


class _Watcher(threading.Thread):
    """Grants the child its checks on the shared device, judges their outputs as soon as they are written, and
    tells the child whether to time, once it owns the device (`device_gate`)."""

    def __init__(self, job: dict[str, Any], reference: CleanReference, gate: DeviceGate) -> None:
        super().__init__(daemon=True, name="ka-judge")
        self.job, self.reference, self.gate = job, reference, gate
        self.done = threading.Event()
        self.wake = threading.Event()  # the child ended, or an owner waits: look now, whatever the back-off
        self.findings: judge.CheckFindings | None = None  # what the comparisons of the checks' outputs found
        self.error: str | None = None
        self.process: SandboxedProcess | None = None
        self._shared = False
        self._poll_s = config.JUDGE_POLL_S
        self.seconds = {"parent_judge": 0.0, "parent_wait_for_window": 0.0}  # where the parent's time went

    def attach(self, process: SandboxedProcess) -> None:
        """The child started: it joins the device's members (stopped while another times) and is watched."""
        self.process = process
        self.gate.join(process)
        self.start()

    def run(self) -> None:
        began = time.thread_time()
        self.gate.watch_owners(self.wake)
        try:
            self._watch()
        finally:
            self.gate.unwatch_owners(self.wake)
            self.seconds["cpu.parent_watch"] = round(time.thread_time() - began, 4)  # judging included

    def _watch(self) -> None:
        directory = Path(self.job["outputs_dir"])
        ready = Path(self.job["ready_path"])
        while not self.done.is_set() and not ready.exists():
            if tensor_files.is_complete(directory):  # it skipped the hand-shake: judged all the same
                self._judge(directory)
                return
            self._nap()
        if self.done.is_set() or not self._granted(lambda: self.gate.acquire_shared(abort=self.done)):
            return
        self._shared = True
        self._say("checks_go_path", "checks")
        round_, asked = 1, False
        checks_done = Path(self.job["checks_done_path"])
        self._poll_s = config.JUDGE_POLL_S
        while not self.done.is_set():
            if tensor_files.is_complete(directory):
                self._release_shared()
                self._judge(directory)
                return
            if self._shared and checks_done.exists():  # past its last yield point, outputs on the host:
                self._release_shared()  # writing files needs no device
            pause, paused, resume = yield_words(Path(self.job["pause_path"]), round_)
            if self._shared and not asked and self.gate.owner_waiting():
                write_word(pause, "pause")
                asked = True
            elif asked and paused.exists():
                if not self._yield_turn():
                    return
                write_word(resume, "resume")
                round_, asked = round_ + 1, False
            self._nap(brisk=asked)

    def _nap(self, brisk: bool = False) -> None:
        """Wait before looking at the child's files again: `JUDGE_POLL_S` while a waiting owner needs its answer
        (`brisk`), otherwise twice as long each time up to `JUDGE_POLL_MAX_S`. A waiting owner or the child's end
        cuts the wait short (`wake`) and brings the looks back to `JUDGE_POLL_S`."""
        if self.wake.wait(config.JUDGE_POLL_S if brisk else self._poll_s):
            self.wake.clear()
            self._poll_s = config.JUDGE_POLL_S
        elif not brisk:
            self._poll_s = min(self._poll_s * 2, config.JUDGE_POLL_MAX_S)

    def _yield_turn(self) -> bool:
        """The child paused between two steps (its work synchronised): let the waiting owner have the device,
        then take the shared hold again. False when the child ended meanwhile."""
        self._shared = False
        self.gate.release_shared(yielded=True)
        if not self._granted(lambda: self.gate.acquire_shared(abort=self.done)):
            return False
        self._shared = True
        return True

    def _granted(self, acquire) -> bool:
        """Wait for a hold on the device; the child's clock stands still meanwhile (it waits on us)."""
        assert self.process is not None
        self.process.hold_clock()
        try:
            return bool(acquire())
        finally:
            self.process.release_clock()

    def _judge(self, directory: Path) -> None:
        verdict, began, began_cpu = "stop", time.monotonic(), time.thread_time()
        try:
            self.findings = find_checks(directory, self.reference, self.job)
            first = judge.apply_findings({"status": "correct", "flags": []}, self.findings)
            verdict = "time" if first["status"] == "correct" else "stop"
        except tensor_files.OutputFileError as exc:
            self.error = str(exc)
        except Exception as exc:  # noqa: BLE001 - the child must never wait on a watcher that died
            self.error = f"judging failed: {type(exc).__name__}: {exc}"
        judged = time.monotonic()
        self.seconds["parent_judge"] = round(judged - began, 4)
        self.seconds["cpu.parent_judge"] = round(time.thread_time() - began_cpu, 4)  # the rest: the lock, the files
        if verdict == "time":
            owns = self._granted(lambda: self.gate.acquire_exclusive(self.process, "timing", abort=self.done))
            verdict = "time" if owns else "stop"
            self.seconds["parent_wait_for_window"] = round(time.monotonic() - judged, 4)
        self._say("go_path", verdict)
        if verdict == "time":
            self._release_when_timed(Path(self.job["timed_path"]))

    def _release_when_timed(self, timed: Path) -> None:
        """The child says its timed calls are over and synchronised: the next window need not wait while it
        writes files and exits (stopped, as every member, while another owns the device)."""
        while not self.done.wait(config.JUDGE_POLL_S):
            if timed.exists():
                assert self.process is not None
                self.gate.release_exclusive(self.process)
                return

    def _say(self, key: str, word: str) -> None:
        write_word(Path(self.job[key]), word)

    def _release_shared(self) -> None:
        if self._shared:
            self._shared = False
            self.gate.release_shared()

    def finish(self) -> None:
        """The child has ended: stop watching, give back every hold, leave the members."""
        self.done.set()
        self.wake.set()
        if self.ident is not None:
            self.join()
        self._release_shared()
        if self.process is not None:
            self.gate.release_exclusive(self.process)
            self.gate.leave(self.process)


def _tolerance(job: dict[str, Any]) -> tuple[float, float]:
    return float(job["atol"]), float(job["rtol"])


def run_judged(job: dict[str, Any], scratch: Path, options: VerifyOptions, reference: CleanReference,
               pooled: PooledChild | None = None) -> tuple[dict[str, Any] | None, ChildOutcome]:  # fmt: skip
    """Run the candidate's child on `job` and judge what it wrote; (result, outcome) as `run_child` gives,
    the result holding the judged status, flags and diffs (None when the child left no result)."""
    job["reference"] = reference.public_manifest()
    job["outputs_dir"] = str(scratch / "outputs")
    job["timing_outputs_dir"] = str(scratch / "timing_outputs")
    job["go_path"] = str(scratch / "go")
    job["ready_path"] = str(scratch / "ready")
    job["checks_go_path"] = str(scratch / "checks_go")
    job["pause_path"] = str(scratch / "pause")  # pause.N / paused.N / resume.N: checks yielding to an owner
    job["timed_path"] = str(scratch / "timed")  # the child's timed calls are over: the window may end
    job["checks_done_path"] = str(scratch / "checks_done")  # the checks' device work is over: the shared hold ends
    watcher = _Watcher(job, reference, device_gate(options.backend, options.device_index))
    try:
        result, outcome = run_child(job, scratch, options, options.timeout_s, pooled, on_start=watcher.attach)
    finally:
        watcher.finish()
    if result is not None and isinstance(result.get("phase_s"), dict):
        result["phase_s"].update(watcher.seconds)  # the child's phases are its claims, for the log alone
    if result is None or result.get("status") not in ("correct", "runtime_error", "incorrect"):
        return result, outcome
    findings = watcher.findings
    if findings is None:
        try:
            findings = find_checks(Path(job["outputs_dir"]), reference, job)
        except tensor_files.OutputFileError as exc:
            if result.get("status") != "correct":
                return result, outcome  # it failed before writing outputs (raised on load, say)
            return {**result, "status": "incorrect", "error": f"the candidate's outputs: {exc}"}, outcome
    judged = judge.apply_findings(result, findings)
    if judged["status"] == "correct" and isinstance(result.get("runtime"), dict):
        error = _timing_error(job, reference)
        if error:
            judged.update(status="incorrect", error=error)
    if judged["status"] != "correct":  # only a kernel judged correct has a runtime worth a record
        for name in ("runtime", "eager_window", "speedup_blocks"):
            judged.pop(name, None)
    return judged, outcome


def find_checks(directory: Path, reference: CleanReference, job: dict[str, Any]) -> judge.CheckFindings:
    """The comparisons of the checks' outputs in `directory`, made once per candidate (raises
    tensor_files.OutputFileError when the directory cannot be read)."""
    outputs = tensor_files.OutputsDir(directory, reference.file_limit())
    return judge.find_checks(outputs, reference.outputs, reference.manifest, *_tolerance(job))


def _timing_error(job: dict[str, Any], reference: CleanReference) -> str | None:
    sets = int(reference.manifest.get("timing_sets") or 0)
    if not sets:
        return None
    try:
        timed = tensor_files.OutputsDir(job["timing_outputs_dir"], reference.file_limit())
    except tensor_files.OutputFileError as exc:
        return f"timed outputs: {exc}"
    return judge.judge_timing(timed, reference.outputs, sets, *_tolerance(job))
