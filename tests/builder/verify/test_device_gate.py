"""The device gate: checks share a device, a timing window owns it and stops every other member."""

from __future__ import annotations

import os
import sys
import threading
import time

import psutil
import pytest

from builder.verify.engine.device_gate import DeviceGate, DeviceTurn, Exclusive, device_gate, keep_timing_cores
from builder.verify.protocol.words import write_word
from builder.verify.sandbox.bubblewrap import bwrap_usable
from builder.verify.sandbox.cores import move_this_process, work_cores
from builder.verify.sandbox.process import SandboxedProcess


class Member:
    def __init__(self) -> None:
        self.events: list[str] = []

    def pause(self) -> None:
        self.events.append("pause")

    def resume(self) -> None:
        self.events.append("resume")


def in_thread(target) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def test_checks_share_the_device_and_an_owner_waits_for_them():
    gate = DeviceGate()
    assert gate.acquire_shared() and gate.acquire_shared()
    owned = threading.Event()
    owner = object()
    thread = in_thread(lambda: gate.acquire_exclusive(owner) and owned.set())
    time.sleep(0.2)
    assert not owned.is_set()  # two checks in flight
    gate.release_shared()
    time.sleep(0.1)
    assert not owned.is_set()  # one still in flight
    gate.release_shared()
    thread.join(2)
    assert owned.is_set() and gate.owner() is owner
    gate.release_exclusive(owner)
    assert gate.owner() is None and gate.stats.owned_count == 1


def test_an_owner_that_starts_to_wait_sets_the_events_of_those_watching_for_owners():
    gate = DeviceGate()
    early, late, gone = threading.Event(), threading.Event(), threading.Event()
    gate.watch_owners(early)
    gate.watch_owners(gone)
    gate.unwatch_owners(gone)
    assert gate.acquire_shared()
    owner = object()
    thread = in_thread(lambda: gate.acquire_exclusive(owner))
    assert early.wait(2)  # the owner waits for the checks: its watchers hear of it at once
    gate.watch_owners(late)
    assert late.is_set()  # watching while an owner already waits
    assert not gone.is_set()
    gate.release_shared()
    thread.join(2)
    gate.release_exclusive(owner)


def test_a_waiting_owner_goes_before_new_checks():
    gate = DeviceGate()
    gate.acquire_shared()
    order: list[str] = []
    owner = object()

    def own() -> None:
        gate.acquire_exclusive(owner)
        order.append("owner")
        time.sleep(0.1)
        gate.release_exclusive(owner)

    def check() -> None:
        gate.acquire_shared()
        order.append("check")
        gate.release_shared()

    owning = in_thread(own)
    time.sleep(0.1)  # the owner now waits for the first check
    checking = in_thread(check)
    time.sleep(0.1)
    assert order == []  # the new check waits behind the owner, not beside the first check
    gate.release_shared()
    owning.join(2)
    checking.join(2)
    assert order == ["owner", "check"]


def test_the_gate_counts_time_unheld_shared_and_time_an_owner_waited_on_checks_apart():
    began = time.monotonic()
    gate = DeviceGate()
    time.sleep(0.2)  # nobody holds it
    assert gate.acquire_shared()
    time.sleep(0.25)  # checks hold it shared, nobody waits to own it
    owner = Member()
    waiting = in_thread(lambda: gate.acquire_exclusive(owner))
    time.sleep(0.3)  # the owner waits for the checks, the device is nobody's own
    gate.release_shared()
    waiting.join(5)
    time.sleep(0.2)  # owned: neither
    second = Member()
    queued = in_thread(lambda: gate.acquire_exclusive(second))
    time.sleep(0.2)  # an owner behind another owner: waiting, but not on checks
    gate.release_exclusive(owner)
    queued.join(5)
    gate.release_exclusive(second)
    stats = gate.snapshot()
    # A sleep never ends early, so no phase outlasts its own sleep by more than all five sleeps' overrun together
    # (a loaded machine stretches them).
    late = time.monotonic() - began - (0.2 + 0.25 + 0.3 + 0.2 + 0.2)
    assert 0.2 <= stats.unheld_s < 0.35 + late and 0.3 <= stats.drain_s < 0.45 + late
    assert 0.25 <= stats.shared_s < 0.4 + late
    assert stats.owner_wait_s >= stats.drain_s + 0.2  # the second owner's wait behind the first is not drain


def test_owning_stops_every_other_member_until_released():
    gate = DeviceGate()
    timing, waiting, late = Member(), Member(), Member()
    gate.join(timing)
    gate.join(waiting)
    with Exclusive(gate, "baseline"):  # a trusted owner: every member stops
        assert timing.events == ["pause"] and waiting.events == ["pause"]
    assert timing.events == waiting.events == ["pause", "resume"]
    gate.acquire_exclusive(timing)
    assert timing.events == ["pause", "resume"] and waiting.events[-1] == "pause"
    gate.join(late)  # started during the window: stopped at once
    assert late.events == ["pause"]
    gate.leave(late)  # ended during the window: let go
    assert late.events == ["pause", "resume"]
    gate.release_exclusive(timing)
    assert waiting.events == ["pause", "resume", "pause", "resume"] and late.events == ["pause", "resume"]
    assert gate.stats.by_purpose.keys() == {"baseline", "timing"}


class SlowMember(Member):
    def pause(self) -> None:
        time.sleep(0.05)
        super().pause()

    def resume(self) -> None:
        time.sleep(0.03)
        super().resume()


def test_the_time_spent_stopping_and_continuing_members_is_counted():
    gate = DeviceGate()
    owner, others = Member(), [SlowMember(), SlowMember()]
    for member in [owner, *others]:
        gate.join(member)
    gate.acquire_exclusive(owner)
    gate.release_exclusive(owner)
    assert 0.16 <= gate.stats.stopping_s < 0.16 + 0.3


def test_an_owner_first_in_line_goes_before_owners_that_waited_longer():
    """The control kernel's window (`first`): a build's records wait for its verdict, not for every baseline."""
    gate = DeviceGate()
    holder = object()
    gate.acquire_exclusive(holder)
    order: list[str] = []

    def own(name: str, first: bool = False) -> None:
        owner = object()
        gate.acquire_exclusive(owner, first=first)
        order.append(name)
        gate.release_exclusive(owner)

    waiting = [in_thread(lambda n=n: own(n)) for n in ("baseline", "timing")]
    time.sleep(0.1)
    control = in_thread(lambda: own("control", first=True))
    time.sleep(0.1)
    gate.release_exclusive(holder)
    for thread in [*waiting, control]:
        thread.join(2)
    assert order[0] == "control" and sorted(order[1:]) == ["baseline", "timing"]


def test_an_aborted_wait_first_in_line_holds_nothing_and_lets_the_others_go():
    gate = DeviceGate()
    holder, other = object(), object()
    gate.acquire_exclusive(holder)
    abort = threading.Event()
    got: list[bool] = []
    control = in_thread(lambda: got.append(gate.acquire_exclusive(object(), abort=abort, first=True)))
    time.sleep(0.1)
    abort.set()
    control.join(2)
    gate.release_exclusive(holder)
    assert got == [False]
    waiting = in_thread(lambda: got.append(gate.acquire_exclusive(other)))
    waiting.join(2)
    assert got == [False, True]
    gate.release_exclusive(other)


def test_an_aborted_wait_holds_nothing():
    gate = DeviceGate()
    gate.acquire_shared()
    abort = threading.Event()
    abort.set()
    assert gate.acquire_exclusive(object(), abort=abort) is False
    gate.release_shared()
    assert gate.acquire_shared(abort=abort)  # nothing was left holding or waiting
    gate.release_shared()


def test_a_stopped_child_makes_no_progress_and_its_stopped_time_is_not_its_timeout(tmp_path):
    ticks = tmp_path / "ticks"
    loop = f"import time\nwhile True:\n    open({str(ticks)!r}, 'a').write('.')\n    time.sleep(0.01)\n"
    child = SandboxedProcess([sys.executable, "-c", loop], tmp_path / "scratch", gpu=False, isolation="process",
                             extra_binds=[tmp_path])  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while not ticks.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        child.pause()
        time.sleep(0.2)  # a tick written just before the stop lands
        stopped_at = ticks.stat().st_size
        time.sleep(0.5)
        assert ticks.stat().st_size == stopped_at
        assert child.held_s() >= 0.5
        child.resume()
        time.sleep(0.3)
        assert ticks.stat().st_size > stopped_at
    finally:
        child.kill()


@pytest.mark.parametrize("isolation", ["process", pytest.param("bwrap", marks=pytest.mark.skipif(
    not bwrap_usable(), reason="needs bubblewrap"))])  # fmt: skip
def test_a_window_stops_every_other_member_with_one_look_over_the_machine(tmp_path, monkeypatch, isolation):
    """Each member's escapees are looked for once a grant and once a release for all members, not once each."""
    from builder.verify.sandbox import process_tree

    looks = []
    real = process_tree.runs_processes
    monkeypatch.setattr(process_tree, "runs_processes", lambda runs: looks.append(len(runs)) or real(runs))
    loop = "import time\nwhile True:\n    open('ticks', 'a').write('.')\n    time.sleep(0.01)\n"
    members = [SandboxedProcess([sys.executable, "-c", loop], tmp_path / f"m{n}", gpu=False, isolation=isolation)
               for n in range(3)]  # fmt: skip
    gate, owner = DeviceGate(), Member()
    try:
        deadline = time.monotonic() + 15
        while not all((m.scratch / "ticks").exists() for m in members) and time.monotonic() < deadline:
            time.sleep(0.05)
        for member in [owner, *members]:
            gate.join(member)
        for member in members:
            member._namespace()  # looked up once a child lives, as the gate's first stop does
        looks.clear()
        gate.acquire_exclusive(owner)
        time.sleep(0.3)  # a tick written just before the stop lands
        stopped_at = [(m.scratch / "ticks").stat().st_size for m in members]
        time.sleep(0.4)
        assert [(m.scratch / "ticks").stat().st_size for m in members] == stopped_at
        assert all(m.held_s() >= 0.4 for m in members)
        gate.release_exclusive(owner)
        time.sleep(0.3)
        assert all((m.scratch / "ticks").stat().st_size > at for m, at in zip(members, stopped_at, strict=True))
        assert looks == [3, 3]
    finally:
        for member in members:
            member.kill()


def test_time_held_moves_the_deadline(tmp_path):
    child = SandboxedProcess([sys.executable, "-c", "import time; time.sleep(1.5)"], tmp_path, gpu=False,
                             isolation="process")  # fmt: skip
    child.hold_clock()  # the parent keeps the child waiting for 1 s of its 1.5 s
    time.sleep(1.0)
    child.release_clock()
    outcome = child.wait(timeout_s=1.0)
    assert not outcome.timed_out and outcome.returncode == 0
    fresh = SandboxedProcess([sys.executable, "-c", "import time; time.sleep(1.5)"], tmp_path, gpu=False,
                             isolation="process")  # fmt: skip
    assert fresh.wait(timeout_s=1.0).timed_out  # the same run without the hold


def test_timing_cores_are_kept_per_gpu_only_when_enough_are_left():
    try:
        sixteen = set(range(16))
        assert keep_timing_cores(1, 2, sixteen) == {0: {14, 15}}
        assert work_cores() == set(range(14))
        assert keep_timing_cores(2, 2, sixteen) == {0: {14, 15}, 1: {12, 13}}
        assert device_gate("cuda", 1).timing_cores == {12, 13} and device_gate("cpu").timing_cores is None
        assert keep_timing_cores(1, 2, {0, 1, 2}) == {} and work_cores() is None  # 2 of 3 would starve the rest
    finally:
        keep_timing_cores(0, 0)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_children_start_off_the_timing_cores_and_an_owner_moves_onto_them(tmp_path):
    cores = sorted(os.sched_getaffinity(0))
    try:
        kept = keep_timing_cores(1, 1, set(cores))[0]
        threads = "import threading, time\nfor _ in range(3): threading.Thread(target=time.sleep, args=(30,)).start()\n"
        child = SandboxedProcess([sys.executable, "-c", threads + "time.sleep(30)"], tmp_path, gpu=False,
                                 isolation="process")  # fmt: skip
        try:
            process = psutil.Process(child.pid)
            deadline = time.monotonic() + 10
            while process.num_threads() < 4 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert set(process.cpu_affinity()) == set(cores) - kept  # started on the work cores
            assert os.sched_getaffinity(0) == set(cores) - kept  # and so does the parent's judging
            gate = DeviceGate(timing_cores=kept)
            gate.acquire_exclusive(child)
            assert all(set(os.sched_getaffinity(t.id)) == kept for t in process.threads())  # every thread moved
            gate.release_exclusive(child)
        finally:
            child.kill()
    finally:
        keep_timing_cores(0, 0)
    assert os.sched_getaffinity(0) == set(cores)  # given back


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_cores_given_back_are_read_afresh_by_the_next_keep():
    """A bench that runs one GPU on fewer cores gives the kept cores back, narrows the process, and keeps again:
    the next keep works within the narrowed cores, not the ones the first keep saw."""
    cores = sorted(os.sched_getaffinity(0))
    try:
        assert keep_timing_cores(1, 1, set(cores)) == {0: {cores[-1]}}
        keep_timing_cores(0, 0)
        assert os.sched_getaffinity(0) == set(cores)  # given back
        move_this_process({cores[0]})
        assert keep_timing_cores(1, 1) == {}  # one core left: none to keep
        assert os.sched_getaffinity(0) == {cores[0]}
    finally:
        keep_timing_cores(0, 0)
        move_this_process(set(cores))
    assert os.sched_getaffinity(0) == set(cores)


def test_a_trusted_childs_turn_starts_only_once_it_is_ready(tmp_path):
    """A reference child's start-up holds nothing: its shared turn begins when it says ready, and waits behind an
    owner (a timing window) that got there first."""
    ready, go = tmp_path / "ready", tmp_path / "go"
    script = (f"import pathlib, time\ntime.sleep(0.5)\npathlib.Path({str(ready)!r}).write_text('1')\n"
              f"while not pathlib.Path({str(go)!r}).exists(): time.sleep(0.01)\n")  # fmt: skip
    gate = DeviceGate()
    turn = DeviceTurn(gate, ready, go, "reference", exclusive=False)
    child = SandboxedProcess([sys.executable, "-c", script], tmp_path / "scratch", gpu=False, isolation="process",
                             extra_binds=[tmp_path])  # fmt: skip
    turn.attach(child)
    window = object()
    assert gate.acquire_exclusive(window)  # the child is still starting: nothing held against the window
    time.sleep(1.0)
    assert ready.exists() and not go.exists()  # ready, but the window is on
    gate.release_exclusive(window)
    outcome = child.wait(timeout_s=10)
    assert go.exists() and outcome.returncode == 0
    turn.finish()
    assert gate.acquire_exclusive(window, abort=threading.Event())  # the shared hold was given back
    gate.release_exclusive(window)


def test_a_baselines_set_up_is_stopped_while_a_window_owns_the_device(tmp_path):
    """A baseline child's set-up runs models and torch.compile's first calls on the device outside any hold: it is
    a member until it is ready (stopped through another's window), then owns the device without stopping itself."""
    ready, go, done = tmp_path / "ready", tmp_path / "go", tmp_path / "done"
    script = (f"import pathlib, time\ntime.sleep(0.3)\npathlib.Path({str(ready)!r}).write_text('1')\n"
              f"while not pathlib.Path({str(go)!r}).exists(): time.sleep(0.01)\n"
              f"pathlib.Path({str(done)!r}).write_text('1')\n")  # fmt: skip
    gate = DeviceGate()
    window = object()
    assert gate.acquire_exclusive(window)  # a candidate's window is on when the baseline starts
    turn = DeviceTurn(gate, ready, go, "baseline", exclusive=True, member_while_setting_up=True)
    child = SandboxedProcess([sys.executable, "-c", script], tmp_path / "scratch", gpu=False, isolation="process",
                             extra_binds=[tmp_path])  # fmt: skip
    turn.attach(child)
    time.sleep(1.5)
    assert not ready.exists()  # stopped: its set-up made no progress through the window
    gate.release_exclusive(window)
    outcome = child.wait(timeout_s=10)
    assert outcome.returncode == 0 and done.exists()  # ready, then its own turn: it was not stopped by it
    turn.finish()
    assert gate.stats.by_purpose.get("baseline", 0.0) > 0
    assert gate.acquire_exclusive(window, abort=threading.Event())  # the baseline's hold was given back
    assert not gate._members  # and it is no member any more
    gate.release_exclusive(window)


def test_the_parents_word_never_follows_a_link_the_child_left(tmp_path):
    victim = tmp_path / "parent-file"
    victim.write_text("precious")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "go").symlink_to(victim)  # the child's directory: it may leave links under any name it can guess
    (scratch / ".go.tmp").symlink_to(victim)
    write_word(scratch / "go", "time")
    assert victim.read_text() == "precious"
    assert (scratch / "go").read_text() == "time" and not (scratch / "go").is_symlink()


@pytest.mark.skipif(not bwrap_usable(), reason="needs bubblewrap")
def test_a_stopped_sandbox_stops_a_descendant_that_cleared_its_environment(tmp_path):
    """A candidate's process that left the session and dropped the run's marker still lives in bwrap's PID
    namespace: it is stopped with the rest."""
    ticker = "import time\nwhile True:\n    open('ticks', 'a').write('.')\n    time.sleep(0.01)\n"
    script = (f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', {ticker!r}], env={{}}, "
              "start_new_session=True)\ntime.sleep(60)\n")  # fmt: skip
    scratch = tmp_path / "scratch"
    child = SandboxedProcess([sys.executable, "-c", script], scratch, gpu=False, isolation="bwrap")
    ticks = scratch / "ticks"
    try:
        deadline = time.monotonic() + 15
        while not ticks.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ticks.exists()
        child.pause()
        time.sleep(0.3)
        stopped_at = ticks.stat().st_size
        time.sleep(0.5)
        assert ticks.stat().st_size == stopped_at
        child.resume()
        time.sleep(0.3)
        assert ticks.stat().st_size > stopped_at
    finally:
        child.kill()


def ncu_like_child(tmp_path, gate: DeviceGate, after_go: str = "") -> tuple[DeviceTurn, SandboxedProcess]:
    """A child whose turn ends on its own word (Nsight Compute's): it says `ready`, waits for `go`, then runs
    `after_go` (Python lines); its words are tmp_path's ready, go and turn_done."""
    ready, go = tmp_path / "ready", tmp_path / "go"
    script = (f"import pathlib, time\npathlib.Path({str(ready)!r}).write_text('1')\n"
              f"while not pathlib.Path({str(go)!r}).exists(): time.sleep(0.01)\n{after_go}")  # fmt: skip
    turn = DeviceTurn(gate, ready, go, "ncu", exclusive=True, done=tmp_path / "turn_done")
    child = SandboxedProcess([sys.executable, "-c", script], tmp_path / "scratch", gpu=False, isolation="process",
                             extra_binds=[tmp_path])  # fmt: skip
    turn.attach(child)
    return turn, child


def test_a_turn_the_child_ends_itself_frees_the_device_and_stops_it_through_the_next_window(tmp_path):
    """Nsight Compute's child: its turn ends when it says its device work is over, not when it exits (ncu's
    report and the exit take seconds); from then on it is a member, stopped through another's window."""
    go, done, ticks = tmp_path / "go", tmp_path / "turn_done", tmp_path / "ticks"
    gate = DeviceGate()
    after_go = (f"pathlib.Path({str(done)!r}).write_text('done')\nfor tick in range(30):\n"
                f"    pathlib.Path({str(ticks)!r}).write_text(str(tick)); time.sleep(0.05)\n")  # fmt: skip
    turn, child = ncu_like_child(tmp_path, gate, after_go)
    window = object()
    deadline = time.monotonic() + 10
    while not ticks.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert go.exists() and done.exists() and ticks.exists()  # its turn came and it said it was over
    give_up = threading.Event()
    threading.Timer(3.0, give_up.set).start()
    assert gate.acquire_exclusive(window, abort=give_up)  # the device is free while the child still runs
    try:
        time.sleep(0.2)  # a stop in flight may let one more tick through
        stopped_at = ticks.read_text()
        time.sleep(0.6)
        assert ticks.read_text() == stopped_at  # a member again: stopped through the window
    finally:
        gate.release_exclusive(window)
    outcome = child.wait(timeout_s=10)
    assert outcome.returncode == 0 and ticks.read_text() == "29"
    turn.finish()
    assert not gate._members and gate.stats.by_purpose["ncu"] < 2.0  # the turn lasted until its word, not the exit


def test_a_turn_without_its_word_holds_the_device_until_finish(tmp_path):
    """A child that never says its device work is over keeps its turn until it is gone (the timeout bounds it)."""
    gate = DeviceGate()
    turn, child = ncu_like_child(tmp_path, gate, "time.sleep(0.5)\n")
    go = tmp_path / "go"
    assert child.wait(timeout_s=10).returncode == 0 and go.exists()
    assert gate.owner() is child  # still owned (by the child itself): it never said it was done
    turn.finish()
    assert gate.owner() is None and not gate._members


def test_a_child_that_ends_its_turn_itself_is_a_member_from_its_grant_to_its_exit(tmp_path):
    """The ncu child says ready before it loads candidate code or touches the device: while it waits (here behind
    checks in flight) it is not a member, so windows meanwhile leave it running; from its grant to its exit it
    is one (after its turn, stopped through others' windows)."""
    ready, go, done = tmp_path / "ready", tmp_path / "go", tmp_path / "turn_done"
    seen = tmp_path / "seen"
    gate = DeviceGate()
    assert gate.acquire_shared()  # checks in flight: the child's turn has to wait for them
    after_go = (f"pathlib.Path({str(done)!r}).write_text('done')\n"
                f"while not pathlib.Path({str(seen)!r}).exists(): time.sleep(0.01)\n")  # fmt: skip
    turn, child = ncu_like_child(tmp_path, gate, after_go)
    deadline = time.monotonic() + 10
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)
    assert ready.exists() and not go.exists() and child not in gate._members  # waiting, not a member
    gate.release_shared()
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert go.exists() and done.exists() and child in gate._members  # its turn came: a member from then on
    seen.write_text("1")
    outcome = child.wait(timeout_s=10)
    assert outcome.returncode == 0
    turn.finish()
    assert gate.owner() is None and not gate._members
