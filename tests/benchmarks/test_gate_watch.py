"""The bench's stall report: once an owner has held the gate (or owners have waited for checks) past the limit,
one report names the purpose and the owner's scratch words; a gate that keeps moving reports nothing."""

from __future__ import annotations

import threading
import time

from benchmarks.gate_watch import GateWatch
from builder.verify.engine.device_gate import DeviceGate


class Owner:
    def __init__(self, scratch) -> None:
        self.scratch = scratch


def watch_while(gate: DeviceGate, seconds: float, capsys) -> str:
    watch = GateWatch(gate, stall_s=0.2, every_s=0.05)
    watch.start()
    time.sleep(seconds)
    watch.stop()
    watch.join()
    return capsys.readouterr().out


def test_an_owner_held_past_the_limit_is_reported_once_with_its_words(tmp_path, capsys):
    (tmp_path / "ready").write_text("1")
    (tmp_path / "go").write_text("time")
    gate, owner = DeviceGate(), Owner(tmp_path)
    gate.acquire_exclusive(owner, "ncu")
    try:
        out = watch_while(gate, 0.6, capsys)
    finally:
        gate.release_exclusive(owner)
    stalls = [line for line in out.splitlines() if "owner has held the device" in line]
    assert len(stalls) == 1 and "ncu" in stalls[0]
    assert "['go', 'ready']" in out


def test_owners_waiting_on_checks_past_the_limit_are_reported(tmp_path, capsys):
    gate = DeviceGate()
    assert gate.acquire_shared()  # checks that do not end
    waiting = Owner(tmp_path)
    give_up = threading.Event()
    waiter = threading.Thread(target=gate.acquire_exclusive, args=(waiting, "timing", give_up))
    waiter.start()
    try:
        out = watch_while(gate, 0.6, capsys)
    finally:
        give_up.set()
        waiter.join()
        gate.release_shared()
    assert out.count("owners have waited") == 1


def test_a_gate_that_keeps_moving_reports_nothing(tmp_path, capsys):
    gate, owner = DeviceGate(), Owner(tmp_path)
    watch = GateWatch(gate, stall_s=0.2, every_s=0.05)
    watch.start()
    for _ in range(8):
        gate.acquire_exclusive(owner, "timing")
        time.sleep(0.05)
        gate.release_exclusive(owner)
        time.sleep(0.02)
    watch.stop()
    watch.join()
    assert "STALL" not in capsys.readouterr().out
