"""Who may use a device when (trusted parent side): checks share it, timing owns it.

Several evaluation workers run on one device so that child start-up, loading, checks and judging overlap,
but a timing window must see the device as if it were alone on it:

- A candidate's checks run under the *shared* hold (any number at once); its timing window, a baseline's
  measured run and an Nsight Compute child's turn (loading the candidate, its first call, the profiled range)
  under the *exclusive* hold, which starts only once no checks are in flight (a child's hold ends once its
  outputs are copied to the host, its work synchronised, so none of it is left queued) and keeps new checks
  from starting until it ends. Waiting owners go first: a stream of checks cannot starve timing. An owner ahead
  of need (a baseline measured before any kernel asked for it) is the exception: it goes only while nothing else
  wants the device, until a kernel waits for it (`acquire_exclusive`'s `needed`).
- On CUDA builds a few cores per GPU are kept for its timing windows (`keep_timing_cores`): every sandboxed
  child starts on the other cores, and the process that owns the device moves onto them.
- A waiting owner need not wait for a long check to end: between two steps of its checks (its GPU work
  synchronised) a checking child looks for the parent's `pause.N`, answers `paused.N`, gives its shared hold
  back and waits for `resume.N`, which comes once it holds the device shared again. A child that never yields
  only makes the owner wait for its checks' end.
- The hand-shake is the children's courtesy; the enforcement is SIGSTOP. Every evaluation child of the device
  is a *member* of its gate, so is an Nsight Compute child from its turn to its exit (it owns the device as
  itself in its turn; before it, it runs no candidate code), and so is a baseline child until its set-up is
  done (it runs models and torch.compile's first calls on the device outside any hold); while one owns the
  device, every other member is stopped (its process group and any escaped descendant), so no other
  candidate's code, a thread it left running say, can launch work into the window. Stopped time does not count
  against a child's timeout.

The gate is per builder process: two builds on one machine do not see each other's gates.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from builder.verify.protocol.words import write_word
from builder.verify.sandbox import cores

if TYPE_CHECKING:
    from builder.verify.sandbox.process import SandboxedProcess


class Pausable(Protocol):
    def pause(self) -> None: ...

    def resume(self) -> None: ...


@dataclass
class GateStats:
    """Where a device's time went, for the throughput benchmark."""

    owned_s: float = 0.0  # seconds held exclusively (timing windows, baselines, ncu)
    owned_count: int = 0
    shared_count: int = 0
    owner_wait_s: float = 0.0  # seconds owners waited, summed over owners (for checks, or behind another owner)
    drain_s: float = 0.0  # seconds an owner waited while nobody owned the device: checks in flight held it up
    unheld_s: float = 0.0  # seconds nobody held the device at all (no checks, no owner): nothing ready for it
    shared_s: float = 0.0  # seconds held shared only (checks, clean references), no owner waiting
    yields: int = 0  # checks that gave the device up between two steps for a waiting owner
    pauses: int = 0  # members stopped for another's window
    stopping_s: float = 0.0  # seconds an owner's grant and release spent stopping and continuing the members
    by_purpose: dict[str, float] = field(default_factory=dict)  # owned seconds per purpose


class DeviceGate:
    """A shared/exclusive hold on one device, with owners preferred, and the members to stop while owned."""

    def __init__(self, timing_cores: set[int] | None = None) -> None:
        self.timing_cores = timing_cores  # the owner's process runs here (None: no cores kept)
        self._cond = threading.Condition()
        self._sharing = 0
        self._owner: object | None = None
        self._owners_waiting = 0
        self._firsts_waiting = 0  # owners waiting with `first`: the others wait for them
        self._earlies_waiting = 0  # owners waiting ahead of need (`needed` unset): nobody waits for them
        self._owned_since = 0.0
        self._purpose = ""
        self._members: set[Pausable] = set()
        self._paused: list[Pausable] = []
        self._owner_watchers: set[threading.Event] = set()  # set when an owner starts to wait (`watch_owners`)
        self.stats = GateStats()
        self._since = time.monotonic()  # when the device's state (below) last changed
        self._state = "unheld"  # "unheld", "draining" (an owner waits, nobody owns), "shared", or "owned"

    def snapshot(self) -> GateStats:
        """The stats so far, the current state's time included."""
        with self._cond:
            self._changed()
            return replace(self.stats, by_purpose=dict(self.stats.by_purpose))

    def _changed(self) -> None:
        """Account the time since the last change to the state it was in (the caller holds the lock)."""
        now = time.monotonic()
        if self._state == "unheld":
            self.stats.unheld_s += now - self._since
        elif self._state == "draining":
            self.stats.drain_s += now - self._since
        elif self._state == "shared":
            self.stats.shared_s += now - self._since
        self._since = now
        if self._owner is not None:
            self._state = "owned"
        elif self._pressing():
            self._state = "draining"
        else:
            self._state = "shared" if self._sharing else "unheld"

    # -- membership: the processes stopped while another owns the device --------------------------------
    def join(self, member: Pausable) -> None:
        with self._cond:
            self._members.add(member)
            if self._owner is not None and self._owner is not member:
                member.pause()  # started during a window: it waits, stopped, for the window's end
                self._paused.append(member)

    def leave(self, member: Pausable) -> None:
        with self._cond:
            self._members.discard(member)
            if member in self._paused:
                self._paused.remove(member)
                member.resume()

    # -- shared: checks --------------------------------------------------------------------------------
    def acquire_shared(self, abort: threading.Event | None = None) -> bool:
        """Hold the device shared; False (nothing held) when `abort` is set first."""
        with self._cond:
            while self._owner is not None or self._pressing():
                if abort is not None and abort.is_set():
                    return False
                self._cond.wait(0.05 if abort is not None else None)
            self._sharing += 1
            self.stats.shared_count += 1
            self._changed()
            return True

    def release_shared(self, yielded: bool = False) -> None:
        """`yielded`: given up between two steps for a waiting owner, to be taken again after it."""
        with self._cond:
            self.stats.yields += yielded
            self._sharing -= 1
            assert self._sharing >= 0, "shared hold released twice"
            self._changed()
            self._cond.notify_all()

    # -- exclusive: timing, baselines, ncu ------------------------------------------------------------
    def acquire_exclusive(self, holder: object, purpose: str = "timing", abort: threading.Event | None = None,
                          first: bool = False, needed: threading.Event | None = None) -> bool:  # fmt: skip
        """Own the device; every member but `holder` is stopped until `release_exclusive`. False (nothing
        held) when `abort` is set first. `first`: before every other waiting owner (the control kernel's window,
        whose verdict a build's records wait for: pipeline/control_gate.py). `needed`: given, an owner ahead of need (a
        baseline measured before any kernel asked for it) that also waits while checks hold the device or another
        owner waits, and holds up no check meanwhile, until `needed` is set (a kernel now waits for it)."""
        waited = time.monotonic()
        ahead = needed is not None and not needed.is_set()
        with self._cond:
            self._owners_waiting += 1
            self._firsts_waiting += first
            self._earlies_waiting += ahead
            self._changed()
            if not ahead:
                self._tell_watchers()
            try:
                while True:
                    if ahead and needed is not None and needed.is_set():  # needed now: an owner like the others
                        ahead = False
                        self._earlies_waiting -= 1
                        self._changed()
                        self._tell_watchers()
                    busy = self._owner is not None or self._sharing or (self._firsts_waiting and not first)
                    if not busy and not (ahead and self._pressing()):
                        break
                    if abort is not None and abort.is_set():
                        return False
                    self._cond.wait(0.05 if abort is not None or ahead else None)
            finally:
                self._owners_waiting -= 1
                self._firsts_waiting -= first
                self._earlies_waiting -= ahead
                self._changed()
                if first:  # the owners that waited for it look again
                    self._cond.notify_all()
            self._owner, self._purpose = holder, purpose
            self._changed()
            self._owned_since = time.monotonic()
            self.stats.owner_wait_s += self._owned_since - waited
            pin = getattr(getattr(holder, "process", holder), "pin", None)
            if self.timing_cores and callable(pin):
                pin(self.timing_cores)
            stopping = [member for member in self._members if member is not holder]
            _together(stopping, "pause")
            self._paused.extend(stopping)
            self.stats.pauses += len(stopping)
            self.stats.stopping_s += time.monotonic() - self._owned_since
            return True

    def release_exclusive(self, holder: object) -> None:
        with self._cond:
            if self._owner is not holder:
                return
            held = time.monotonic() - self._owned_since
            self.stats.owned_s += held
            self.stats.owned_count += 1
            self.stats.by_purpose[self._purpose] = self.stats.by_purpose.get(self._purpose, 0.0) + held
            resuming = time.monotonic()
            _together(self._paused, "resume")
            self._paused = []
            self.stats.stopping_s += time.monotonic() - resuming
            self._owner = None
            self._changed()
            self._cond.notify_all()

    def owner(self) -> object | None:
        return self._owner

    def describe(self) -> dict[str, object]:
        """The hold as it stands, for a benchmark's stall report."""
        with self._cond:
            held = time.monotonic() - self._owned_since if self._owner is not None else 0.0
            return {"owner": self._owner, "purpose": self._purpose if self._owner is not None else None,
                    "owned_s": held, "sharing": self._sharing, "owners_waiting": self._owners_waiting,
                    "members": len(self._members), "stopped": len(self._paused), "state": self._state,
                    "state_s": time.monotonic() - self._since}  # fmt: skip

    def owner_waiting(self) -> bool:
        """An owner waits for the checks in flight: a checking child that can yield (between steps) should."""
        return self._pressing() > 0

    def _pressing(self) -> int:
        """Owners waiting that checks give way to: all but those ahead of need."""
        return self._owners_waiting - self._earlies_waiting

    def _tell_watchers(self) -> None:
        for watcher in self._owner_watchers:
            watcher.set()

    def watch_owners(self, event: threading.Event) -> None:
        """Set `event` whenever an owner starts to wait: a checking child's watcher that looks for its files
        at leisure hears of a waiting owner at once."""
        with self._cond:
            self._owner_watchers.add(event)
            if self._pressing():
                event.set()

    def unwatch_owners(self, event: threading.Event) -> None:
        with self._cond:
            self._owner_watchers.discard(event)


class Exclusive:
    """`with Exclusive(gate, "baseline"):` owns the device for a block (a trusted child: nobody to exempt)."""

    def __init__(self, gate: DeviceGate | None, purpose: str) -> None:
        self.gate, self.purpose = gate, purpose

    def __enter__(self) -> Exclusive:
        if self.gate is not None:
            self.gate.acquire_exclusive(self, self.purpose)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.gate is not None:
            self.gate.release_exclusive(self)


class DeviceTurn(threading.Thread):
    """A child's turn on the device: once it writes `ready` (its set-up done), hold the device (owned,
    or shared when `exclusive` is False) and write `go`; `finish` gives it back. The child's clock stands still
    while it waits for its turn.

    `member_while_setting_up`: the child's set-up uses the device outside any hold (a baseline builds its
    models and runs torch.compile's first calls, seconds of CPU work with device work inside), so it is a
    member until it is ready: stopped, as a candidate's child is, while another owns the device. Its queued
    device work at that moment (bounded by its next synchronisation) falls in the window's untimed warm-up.

    `done`: the child (Nsight Compute's) says ready before it loads candidate code or touches the device, so it is
    not a member while it waits; it becomes one when its turn is granted, owning the device as itself, and stays
    one to its exit (stopped through later windows: a thread the candidate left running cannot reach them). Its
    exclusive turn ends when it writes this word (its profiled range synchronised) rather than at its exit:
    ncu's report and the exit take seconds the device need not wait for."""

    def __init__(self, gate: DeviceGate, ready: Path, go: Path, purpose: str, exclusive: bool = True,
                 member_while_setting_up: bool = False, done: Path | None = None,
                 needed: threading.Event | None = None) -> None:  # fmt: skip
        super().__init__(daemon=True, name=f"ka-turn-{purpose}")
        self.gate, self.ready, self.go, self.purpose, self.exclusive = gate, ready, go, purpose, exclusive
        self.needed = needed  # an exclusive turn ahead of need until set (`DeviceGate.acquire_exclusive`)
        self.member_while_setting_up = member_while_setting_up
        self.done_word = done if exclusive else None
        self.done = threading.Event()
        self.process: SandboxedProcess | None = None
        self._shared = False

    def attach(self, process: SandboxedProcess) -> None:
        self.process = process
        if self.member_while_setting_up:
            self.gate.join(process)  # started during a window: stopped at once
        self.start()

    def _holder(self) -> object:
        """Who owns the device in this turn: the child's process where it stays a member (its own hold must not
        stop it), else this turn."""
        return self.process if self.done_word is not None and self.process is not None else self

    def run(self) -> None:
        while not self.ready.exists():
            if self.done.wait(0.01):
                return
        assert self.process is not None
        if self.member_while_setting_up:
            self.gate.leave(self.process)  # set up and waiting: its own hold must not stop it
        self.process.hold_clock()
        try:
            if self.exclusive:
                holds = self.gate.acquire_exclusive(self._holder(), self.purpose, abort=self.done, needed=self.needed)
            else:
                holds = self._shared = self.gate.acquire_shared(abort=self.done)
        finally:
            self.process.release_clock()
        if holds and self.done_word is not None:
            self.gate.join(self.process)  # the owner: not stopped by its own turn
        if holds:
            write_word(self.go, "time")
        if holds and self.done_word is not None:
            while not self.done_word.exists():
                if self.done.wait(0.01):
                    return
            self.gate.release_exclusive(self._holder())  # still a member: stopped through later windows

    def finish(self) -> None:
        self.done.set()
        if self.ident is not None:
            self.join()
        if (self.member_while_setting_up or self.done_word is not None) and self.process is not None:
            self.gate.leave(self.process)  # ended before it was ready, or a member to its exit
        if self._shared:
            self._shared = False
            self.gate.release_shared()
        self.gate.release_exclusive(self._holder())


def _together(members: list[Pausable], action: str) -> None:
    """`pause` or `resume` each member; members whose kind can do it for several at once
    (`SandboxedProcess.pause_together`: one look over the machine's processes for all their escapees, where one
    each cost the window 2 ms a member on a two-GPU box) are handled together."""
    groups: dict[object, list[Pausable]] = {}
    for member in members:
        groups.setdefault(getattr(type(member), f"{action}_together", None), []).append(member)
    for together, group in groups.items():
        if callable(together):
            together(group)
        else:
            for member in group:
                getattr(member, action)()


_gates: dict[tuple[str, int], DeviceGate] = {}
_gates_lock = threading.Lock()


def device_gate(backend: str, device_index: int = 0) -> DeviceGate:
    """The process's gate of one device (the CPU backend has one: timing there owns the cores)."""
    key = (backend, device_index if backend == "cuda" else 0)
    with _gates_lock:
        gate = _gates.setdefault(key, DeviceGate())
        if backend == "cuda":
            gate.timing_cores = cores.timing_cores(device_index)
        return gate


def keep_timing_cores(devices: int, per_device: int, available: set[int] | None = None) -> dict[int, set[int]]:
    """`cores.keep_timing_cores`, and every CUDA gate of this process told which cores its windows run on."""
    kept = cores.keep_timing_cores(devices, per_device, available)
    with _gates_lock:
        for (backend, index), gate in _gates.items():
            if backend == "cuda":
                gate.timing_cores = kept.get(index)
    return kept
