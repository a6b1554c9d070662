"""An owner ahead of need (a baseline measured before any kernel asked for it) gives way to every other use of the
device until a kernel waits for it (DeviceGate.acquire_exclusive's `needed`, BaselineCache)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from builder.tasks import load_suite
from builder.verify.engine.baseline_cache import BaselineCache
from builder.verify.engine.device_gate import DeviceGate
from builder.verify.options import VerifyOptions


def own_in_thread(gate: DeviceGate, order: list[str], name: str, needed: threading.Event | None = None):
    owner = object()

    def own() -> None:
        gate.acquire_exclusive(owner, purpose=name, needed=needed)
        order.append(name)
        gate.release_exclusive(owner)

    thread = threading.Thread(target=own, daemon=True)
    thread.start()
    return thread


def test_an_early_owner_holds_up_no_check_and_owns_the_device_once_none_is_in_flight():
    gate, order = DeviceGate(), []
    assert gate.acquire_shared()
    watching = threading.Event()
    gate.watch_owners(watching)
    waiting = own_in_thread(gate, order, "early baseline", needed=threading.Event())
    time.sleep(0.2)
    assert not gate.owner_waiting() and not watching.is_set()  # no checking child yields to it
    abort, started = threading.Event(), []
    checking = threading.Thread(target=lambda: started.append(gate.acquire_shared(abort=abort)), daemon=True)
    checking.start()
    checking.join(1)
    abort.set()
    assert started == [True] and order == []  # a new check started beside the first, not behind the owner
    gate.release_shared()
    gate.release_shared()
    waiting.join(2)
    assert order == ["early baseline"] and gate.owner() is None


def test_an_early_owner_lets_every_owner_that_waits_go_first():
    gate, order = DeviceGate(), []
    holder = object()
    gate.acquire_exclusive(holder)
    early = own_in_thread(gate, order, "early baseline", needed=threading.Event())
    time.sleep(0.1)
    window = own_in_thread(gate, order, "timing")
    time.sleep(0.1)
    gate.release_exclusive(holder)
    for thread in (early, window):
        thread.join(2)
    assert order == ["timing", "early baseline"]


def test_an_early_owner_a_kernel_now_waits_for_is_an_owner_like_the_others():
    gate, order = DeviceGate(), []
    assert gate.acquire_shared()
    needed = threading.Event()
    waiting = own_in_thread(gate, order, "baseline", needed=needed)
    time.sleep(0.1)
    needed.set()
    deadline = time.monotonic() + 2
    while not gate.owner_waiting() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert gate.owner_waiting()  # checking children now yield to it
    abort = threading.Event()
    checking = threading.Thread(target=lambda: gate.acquire_shared(abort=abort) and order.append("check"))
    checking.start()
    time.sleep(0.2)
    assert order == []  # the new check waits behind it
    gate.release_shared()
    waiting.join(2)
    checking.join(2)
    assert order == ["baseline", "check"]
    gate.release_shared()


def test_a_kernel_that_waits_for_an_early_baseline_under_way_makes_it_needed(tmp_path, monkeypatch):
    task, seen = load_suite().get("1/1"), []

    def measure(self, task, options, needed=None, **_):
        seen.append(needed)
        if needed is not None:  # its turn on the device comes only once it is needed
            assert needed.wait(10)
        return {"eager_ms": 1.0}

    monkeypatch.setattr(BaselineCache, "_measure", measure)
    cache, options = BaselineCache(tmp_path), VerifyOptions(backend="cuda")
    with ThreadPoolExecutor(1) as warmers:
        cache.prewarm(task, options, warmers)
        while not seen:
            time.sleep(0.01)
        assert seen[0] is not None and not seen[0].is_set()
        started = time.monotonic()
        cache.get(task, options)
        assert seen[0].is_set() and time.monotonic() - started < 5
