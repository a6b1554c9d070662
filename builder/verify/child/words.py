"""What an untrusted child says to the trusted parent and hears from it, through files in its scratch folder:
its result (written whole, then renamed), `ready`, and the words of the device hand-shake (docs/architecture.md,
"Sharing a device"). Child side: runs in the sandboxed process.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from builder.verify.protocol.words import write_result

_parent = os.getppid()  # the process whose words this child waits for (`note_parent` in a forked child)


def note_parent() -> None:
    """Take the current parent as the one whose words this process waits for (a zygote's fork calls it)."""
    global _parent
    _parent = os.getppid()


def await_word(path: str) -> str:
    """The parent's word in `path`, once it is there (the parent's timeout bounds the wait). A child whose parent
    is gone (the builder killed outside bwrap, which would end it too) ends rather than wait for ever."""
    from builder import config

    word = Path(path)
    while not word.exists():
        if os.getppid() != _parent:
            os._exit(3)
        time.sleep(config.JUDGE_POLL_S)
    return word.read_text().strip()


def await_turn(job: dict[str, Any], word_key: str) -> str | None:
    """Say this child is set up (`ready_path`) and wait for the parent's word in job[word_key]: its turn on the
    device (device_gate). None when the job asks for no hand-shake."""
    if not job.get("ready_path") or not job.get(word_key):
        return None
    write_result(job["ready_path"], {"ready": True})
    return await_word(job[word_key])


class YieldPoint:
    """Between two steps of the checks (or of preparing the timing sets): if the parent asks (`pause.N`, an owner
    waits for the device), finish this process's device work, answer `paused.N` and wait for `resume.N`. The
    verdicts do not depend on it: nothing of this process is touched meanwhile."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.pause = Path(job["pause_path"]) if job.get("pause_path") else None
        self.device = "cuda" if job.get("backend") == "cuda" else "cpu"
        self.round = 1
        self.waited_s = 0.0

    def __call__(self) -> None:
        from builder.verify.protocol.words import yield_words

        if self.pause is None:
            return
        asked, paused, resume = yield_words(self.pause, self.round)
        if not asked.exists():
            return
        from builder.verify.child.failures import CandidateFailure, exception_text
        from builder.verify.protocol.compare import sync

        began = time.perf_counter()
        try:
            sync(self.device)  # nothing of ours left queued (side streams too) on the device the owner times on
        except Exception as exc:  # noqa: BLE001 - a CUDA error the candidate's work left
            raise CandidateFailure(exception_text(exc)) from None
        paused.write_text("paused")
        await_word(str(resume))
        self.round += 1
        self.waited_s += time.perf_counter() - began


def await_judgement(job: dict[str, Any]) -> bool:
    """Wait for the parent's word on the checks' outputs: time the candidate only if they passed (the timing
    budget is not spent on incorrect kernels) and once the device is the window's alone."""
    go_path = job.get("go_path")
    return True if not go_path else await_word(go_path) == "time"


def say(job: dict[str, Any], key: str, word: str) -> None:
    """Write `word` where job[key] names (nothing where the job asks for no such word)."""
    if job.get(key):
        Path(job[key]).write_text(word)
