"""One candidate's evaluation: clean reference, candidate child, judgement (trusted parent side).

1. `clean_reference.ReferenceCache.get` runs the clean reference child (mode "reference") once per task, seed
   set and tolerance; every candidate of the task is judged against what it wrote.
2. `run_judged` runs the candidate's child (mode "evaluate"). Once it has loaded the task it says "ready" and
   waits for its checks to be granted a shared hold on the device (`device_gate`); it writes the candidate's
   outputs and waits again; a watcher thread here judges them at once (`judge.find_checks`) and answers "time"
   (once the device is owned for the window) or "stop", so the timing budget is spent only on kernels that
   passed. After the child exits, those findings are weighed with the child's own claims and flags
   (`judge.apply_findings`: no output is compared twice), and the first output of each timed input set is
   judged against its clean reference.
3. Once it has said "time", the watcher referees the child's timing window on this process's clock
   (`referee.py`): the record's runtimes are the referee's, judged by `judge/window.judge_window`, and the child's
   result file carries none. The checks' flags written beside their outputs and the child's guard file
   (`tampered_path`) are weighed with the result file (`weigh_claims`).

No file written by a child is trusted: each is read as safetensors with a size bound, one output at a time.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from builder import config
from builder.verify.engine.children import run_child
from builder.verify.engine.clean_reference import CleanReference
from builder.verify.engine.device_gate import DeviceGate, device_gate
from builder.verify.judge import outputs as judge
from builder.verify.judge.referee import Referee, WindowReport
from builder.verify.judge.window import WindowVerdict, judge_window
from builder.verify.protocol import tensor_files
from builder.verify.protocol.window import FifoLink
from builder.verify.protocol.words import write_word, yield_words
from builder.verify.sandbox.pool import PooledChild
from builder.verify.sandbox.process import ChildOutcome, SandboxedProcess
from schemas import disqualifying_flags

if TYPE_CHECKING:
    from builder.verify.options import VerifyOptions

log = logging.getLogger(__name__)


class _Watcher(threading.Thread):
    """Grants the child its checks on the shared device, judges their outputs as soon as they are written, and
    tells the child whether to time, once it owns the device (`device_gate`)."""

    def __init__(self, job: dict[str, Any], reference: CleanReference, gate: DeviceGate,
                 first_in_line: bool = False) -> None:  # fmt: skip
        super().__init__(daemon=True, name="ka-judge")
        self.job, self.reference, self.gate, self.first_in_line = job, reference, gate, first_in_line
        self.done = threading.Event()
        self.wake = threading.Event()  # the child ended, or an owner waits: look now, whatever the back-off
        self.findings: judge.CheckFindings | None = None  # what the comparisons of the checks' outputs found
        self.window: WindowReport | None = None  # what the parent saw of the timing window
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
            owns = self._granted(lambda: self.gate.acquire_exclusive(self.process, "timing", abort=self.done,
                                                                     first=self.first_in_line))  # fmt: skip
            verdict = "time" if owns else "stop"
            self.seconds["parent_wait_for_window"] = round(time.monotonic() - judged, 4)
        link = FifoLink.parent_side(self.job["window_dir"]) if verdict == "time" else None  # open before "time"
        self._say("go_path", verdict)
        if link is not None:
            self._referee(link)

    def _referee(self, link: FifoLink) -> None:
        """Run the child's timing window on this process's clock (referee.py). Once its last half-block has ended,
        the next window need not wait while the child writes its sampled outputs and other files and exits (stopped,
        as every member, while another owns the device)."""
        assert self.process is not None
        began, process = time.monotonic(), self.process
        try:
            self.window = Referee(link, self.job["window_dir"], self.reference.manifest, self.job,
                                  abort=self.done).run(after_window=lambda: self.gate.release_exclusive(process))  # fmt: skip
        finally:
            link.close()
        self.seconds["parent_referee"] = round(time.monotonic() - began, 4)
        seconds = self.window.seconds if self.window is not None else {}
        self.seconds.update({f"parent_referee.{kind}": round(s, 4) for kind, s in seconds.items()})

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
    job["tampered_path"] = str(scratch / "tampered")  # the child's guard found the verifier changed (tamper.py)
    job["window_dir"] = str(scratch / "window")  # the refereed timing window's FIFOs and revealed outputs
    Path(job["window_dir"]).mkdir(exist_ok=True)
    FifoLink.make(job["window_dir"])
    watcher = _Watcher(job, reference, device_gate(options.backend, options.device_index), options.first_in_line)
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
    for name in WINDOW_FIELDS:  # the child's own figures are never believed: the referee's replace them
        result.pop(name, None)
    result = weigh_claims(result, job, reference)
    judged = judge.apply_findings(result, findings)
    if judged["status"] == "correct":
        judged = apply_window(judged, watcher.window, reference, job)
    if judged["status"] == "correct" and isinstance(judged.get("runtime"), dict):
        error = _timing_error(job, reference)
        if error:
            judged.update(status="incorrect", error=error)
    if judged["status"] != "correct":  # only a kernel judged correct has a runtime worth a record
        for name in ("runtime", "eager_window", "speedup_blocks"):
            judged.pop(name, None)
    return judged, outcome


WINDOW_FIELDS = ("runtime", "eager_window", "speedup_blocks", "timing_method")
MAX_CLAIMS_BYTES, MAX_TAMPERED_BYTES = 1 << 16, 4000


def weigh_claims(result: dict[str, Any], job: dict[str, Any], reference: CleanReference) -> dict[str, Any]:
    """The child's result, with every flag its checks wrote beside their outputs (another writer than the result
    file's) and `tampers_verifier` where its guard reported a change or the two disagree."""
    result = dict(result)
    flags = (
        {f for f in result.get("flags") or [] if isinstance(f, str)} if isinstance(result.get("flags"), list) else set()
    )
    notes = dict(result.get("flag_notes")) if isinstance(result.get("flag_notes"), dict) else {}
    found: list[str] = []
    claims = _checks_claims(job, reference)
    if claims is not None:
        claimed = {f for f in claims.get("flags") or [] if isinstance(f, str)}
        if claimed - flags:
            found.append(f"the result file left out flags the checks found: {', '.join(sorted(claimed - flags))}")
        flags |= claimed
        for name, why in (claims.get("notes") or {}).items():
            notes.setdefault(str(name), str(why))
        if "own_kernel_fraction" in result and result.get("own_kernel_fraction") != claims.get("own_kernel_fraction"):
            found.append("the result file's op census disagrees with the one written beside the checks' outputs")
    tampered = Path(job.get("tampered_path") or "/nonexistent")
    if tampered.is_file() and not tampered.is_symlink():
        found.append("the verifier's code changed in the candidate's process, "
                     + tampered.read_bytes()[:MAX_TAMPERED_BYTES].decode(errors="replace"))  # fmt: skip
    if found:
        flags.add("tampers_verifier")
        notes.setdefault("tampers_verifier", "; ".join(found))
    result.update(flags=sorted(flags), flag_notes=notes)
    return result


def _checks_claims(job: dict[str, Any], reference: CleanReference) -> dict[str, Any] | None:
    """What the checks wrote beside their outputs (`claims`), or None where there is nothing readable."""
    import json

    try:
        value = tensor_files.OutputsDir(job["outputs_dir"], reference.file_limit()).get("claims")
    except tensor_files.OutputFileError:
        return None
    tensors = tensor_files.tensors_of(value) if isinstance(value, list) else None
    if not tensors or tensors[0].numel() > MAX_CLAIMS_BYTES:
        return None
    try:
        claims = json.loads(bytes(tensors[0].numpy().tobytes()))
    except ValueError:
        return None
    return claims if isinstance(claims, dict) else None


def apply_window(judged: dict[str, Any], window: WindowReport | None, reference: CleanReference,
                 job: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """A correct kernel's result with the refereed window's figures, or disqualified by what the referee saw."""
    device = "cuda" if job.get("backend") == "cuda" else "cpu"
    if window is None:
        verdict = WindowVerdict(flags={"timing_mismatch": "the timing window was not refereed"})
    else:
        verdict = judge_window(window, reference.outputs, device, *_tolerance(job))
    judged = dict(judged)
    if verdict.runtime_error:
        judged.update(status="runtime_error", error=verdict.runtime_error, error_origin="candidate")
        return judged
    flags, notes = set(judged.get("flags") or []), dict(judged.get("flag_notes") or {})
    for name, why in verdict.flags.items():
        flags.add(name)
        notes.setdefault(name, why)
    judged.update(flags=sorted(flags), flag_notes=dict(sorted(notes.items())))
    disqualified = sorted(set(verdict.flags) & disqualifying_flags())
    if disqualified or verdict.error:
        lines = ([verdict.error] if verdict.error else []) + [f"{name}: {verdict.flags[name]}" for name in disqualified]
        judged.update(status="incorrect", error="; ".join(lines))
        return judged
    judged.update(verdict.fields)
    return judged


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
