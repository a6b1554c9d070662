"""The builder's side of a stream over several engines, one method at a time (`device_engines.EngineFleet`): which
answer an engine's request gets at the stream's end, the hand-backs asked for and received, and the crash records of
an engine that dies. The engines are handles on fake processes and connections: no process is started."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from builder import config
from builder.verify.engine.device_engines import EngineFleet
from builder.verify.engine.engine_handles import EngineHandle
from builder.verify.engine.hand_back import WINDOW_END
from builder.verify.engine.infrastructure import InfrastructureFailure
from builder.verify.engine.routing import Router

pytestmark = pytest.mark.timeout(60)  # a wait that never ends fails, rather than holding the run


class FakeConnection:
    """Records what is sent; hands out `messages`, then ends as a dead engine's pipe does."""

    def __init__(self, messages: list | None = None) -> None:
        self.sent: list = []
        self.messages = list(messages or [])
        self.closed = False

    def send(self, message) -> None:
        if self.closed:
            raise OSError("the engine has gone")
        self.sent.append(message)

    def recv(self):
        if not self.messages:
            raise EOFError
        return self.messages.pop(0)

    def close(self) -> None:
        self.closed = True


class FakeProcess:
    returncode = -9  # SIGKILLed

    def wait(self, timeout: float | None = None) -> int:
        return self.returncode

    def poll(self) -> int:
        return self.returncode


def task(task_id: str) -> SimpleNamespace:
    return SimpleNamespace(id=task_id)


def fleet_of(*pending: int, pairs: list | None = None, workers: int = 1) -> EngineFleet:
    """A fleet of engines holding `pending[i]` pairs each (engine i's sequences 100*i + n, of its task "t<i>")."""
    router = Router(pairs or [], lookahead=8, engines=len(pending))
    fleet = EngineFleet(router, workers=workers, slack=1)
    for index, count in enumerate(pending):
        share = {"device": str(index), "cores": [], "compile_workers": 1}
        engine = EngineHandle(index, share, FakeProcess(), FakeConnection())
        engine.pending = {100 * index + n: (f"held-{index}-{n}", task(f"t{index}")) for n in range(count)}
        fleet.engines.append(engine)
    return fleet


def test_an_engine_out_of_pairs_closes_its_window_then_takes_pairs_the_busiest_hands_back(monkeypatch):
    monkeypatch.setattr(config, "ENGINE_HAND_BACK_MIN_PAIRS", 1)
    fleet = fleet_of(0, 10, 2)  # the third holds too few to hand any back
    taker, busiest, other = fleet.engines
    taker.flushed = False  # a window of its is not yet full
    assert fleet.choose(taker) is WINDOW_END  # it builds what it holds while it waits
    assert fleet.hand_out(taker, WINDOW_END) and taker.connection.sent == ["window_end"] and taker.flushed

    chosen: list = []
    choosing = threading.Thread(target=lambda: chosen.append(fleet.choose(taker)), daemon=True)
    choosing.start()
    deadline = time.monotonic() + 10
    while not busiest.connection.sent and time.monotonic() < deadline:
        time.sleep(0.01)
    assert busiest.connection.sent == [("hand_back", 4)]  # half its surplus over its one worker
    assert busiest.handing_back and not other.connection.sent
    # The last queued first; 99 is no longer pending (its record came first) and is passed over.
    fleet.receive_hand_back(busiest, [109, 108, 99], {})
    choosing.join(timeout=10)
    assert chosen == [("held-1-9", task("t1"))]  # the first handed back, first in line
    assert len(busiest.pending) == 8 and not busiest.handing_back and busiest.refused_at is None
    assert fleet.router.next_for(2) == ("held-1-8", task("t1"))


def test_an_engine_with_none_to_hand_back_is_not_asked_again_while_its_pending_stand(monkeypatch):
    monkeypatch.setattr(config, "ENGINE_HAND_BACK_MIN_PAIRS", 1)
    fleet = fleet_of(0, 10, 4)
    taker, busiest, other = fleet.engines
    fleet.receive_hand_back(busiest, [], {})  # it had none no worker had begun
    assert busiest.refused_at == 10
    with fleet.schedule:
        fleet.ask_hand_back(taker)
    assert not busiest.connection.sent and other.connection.sent == [("hand_back", 1)]
    with fleet.schedule:
        fleet.ask_hand_back(taker)  # the other is still answering: not asked twice
    assert other.connection.sent == [("hand_back", 1)]


def test_an_engine_is_told_the_end_once_nobody_holds_enough_to_hand_back(monkeypatch):
    monkeypatch.setattr(config, "ENGINE_HAND_BACK_MIN_PAIRS", 4)
    fleet = fleet_of(0, 8)  # 7 over its one worker: less than two hand-backs' least
    taker = fleet.engines[0]
    assert fleet.choose(taker) is None
    assert fleet.hand_out(taker, None) and taker.told_end and taker.connection.sent == [None]


def test_a_pair_handed_out_is_pending_and_carries_its_tasks_shared_reference_once(tmp_path):
    pairs = [("p0", task("a")), ("p1", task("a"))]
    fleet = fleet_of(0, 0, pairs=pairs)
    engine, giver = fleet.engines
    giver.told_end = True  # it holds nobody back
    shared = tmp_path / f"{config.REFERENCE_SHARE_PREFIX}a"
    shared.mkdir()
    fleet.receive_hand_back(giver, [], {"a": SimpleNamespace(directory=str(shared))})
    for _ in pairs:
        assert fleet.hand_out(engine, fleet.choose(engine))
    (first, p0, task_a, offer), (second, p1, _, no_offer) = engine.connection.sent
    assert (p0, p1, offer.directory, no_offer) == ("p0", "p1", str(shared), None)
    assert engine.pending == {first: ("p0", task_a), second: ("p1", task_a)} and not engine.flushed
    fleet.close()  # the engines are reaped, and the shared reference's directory removed
    assert not shared.exists() and engine.connection.closed


def test_a_pair_for_an_engine_that_has_ended_goes_to_another():
    fleet = fleet_of(0, 0, pairs=[("p0", task("a"))])
    gone, other = fleet.engines
    pair = fleet.choose(gone)
    gone.connection.close()  # it died as its answer was sent
    assert not fleet.hand_out(gone, pair) and not gone.pending
    assert fleet.choose(other) == pair


def test_nobody_is_told_the_end_while_a_pair_is_on_its_way_to_an_engine_that_may_give_it_back():
    fleet = fleet_of(0, 0, pairs=[("p0", task("a"))])
    dying, other = fleet.engines
    pair = fleet.choose(dying)  # out of the router, not yet sent: the input has no other
    chosen: list = []
    choosing = threading.Thread(target=lambda: chosen.append(fleet.choose(other)), daemon=True)
    choosing.start()
    choosing.join(timeout=1.5)
    assert choosing.is_alive() and not chosen  # not told the end while the pair may come back
    dying.connection.close()  # it died as its answer was sent
    assert not fleet.hand_out(dying, pair) and not dying.pending
    choosing.join(timeout=10)
    assert chosen == [pair]
    assert fleet.hand_out(other, pair) and other.pending and not fleet.router.in_transit()
    assert fleet.choose(other) is None  # nothing left, nothing on its way: the end


def test_an_engine_that_dies_leaves_each_pending_pair_as_one_crash_record():
    fleet = fleet_of(3)
    engine = fleet.engines[0]
    engine.connection.messages = [("next",), ("record", 1, "record of held-0-1")]
    fleet.serve(engine)  # until its pipe ends, without "done"
    assert engine.ended and not engine.done and engine.has_asked and not engine.pending
    assert [engine.requests.get_nowait() for _ in range(2)] == [True, None]  # its `answer` thread stops
    records = list(fleet.records())
    assert records[0] == "record of held-0-1"
    crashes = records[1:]
    assert sorted(crash.candidate for crash in crashes) == ["held-0-0", "held-0-2"]
    assert all(isinstance(crash, InfrastructureFailure) and "(exit -9)" in crash.reason for crash in crashes)
    assert len({crash.incident for crash in crashes} - {None}) == 1  # one incident: the build counts it once


def test_pairs_handed_back_for_an_engine_that_died_become_crash_records_once_nobody_is_left():
    fleet = fleet_of(0, 3)
    taker, giver = fleet.engines
    giver.told_end = True  # its input had ended: it asks for no more
    fleet.receive_hand_back(giver, [101, 102], {})  # for the taker, which dies before it takes them
    fleet.serve(taker)
    giver.connection.messages = [("record", 100, "record of held-1-0"), ("done",)]
    fleet.serve(giver)
    records = list(fleet.records())
    assert records[0] == "record of held-1-0"
    crashes = records[1:]
    assert sorted(crash.candidate for crash in crashes) == ["held-1-1", "held-1-2"]
    assert all(isinstance(crash, InfrastructureFailure) and "no engine was left" in crash.reason for crash in crashes)
    assert len({crash.incident for crash in crashes}) == 1


def test_the_stream_fails_when_every_engine_ended_before_the_last_pair_was_handed_out():
    fleet = fleet_of(0, pairs=[("p0", task("a"))])
    fleet.serve(fleet.engines[0])
    with pytest.raises(RuntimeError, match="every engine process ended"):
        list(fleet.records())


def test_each_engine_is_told_its_share_of_the_scratch_disk():
    from builder.verify.options import VerifyOptions

    fleet = fleet_of(0, 0, 0, 0)
    fleet.start(VerifyOptions(backend="cuda"), facts={})
    told = [engine.connection.sent[0][1] for engine in fleet.engines]
    assert [options.disk_share for options in told] == [0.25] * 4
    assert [options.engines for options in told] == [1] * 4
