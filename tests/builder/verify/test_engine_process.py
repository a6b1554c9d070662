"""The engine process's side (`engine_process.py`): its entry point and the log records it sends the builder."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from builder.verify.engine import engine_handles, engine_process
from builder.verify.engine.hand_back import WINDOW_END


def test_the_engine_entry_point_says_how_to_use_it(capsys):
    assert engine_process.main([]) == 2
    assert "usage: python -m builder.verify.engine.engine_process FD" in capsys.readouterr().err


def test_an_engines_log_record_reaches_the_builders_logger_whole(caplog):
    sent = []
    handler = engine_process._ForwardLogs(sent.append)
    engine_log = logging.getLogger("builder.verify.test-engine-side")
    engine_log.addHandler(handler)
    engine_log.propagate = False  # as in an engine: the record goes to the builder only
    try:
        try:
            raise ValueError("the child's result was garbage")
        except ValueError:
            engine_log.warning("kernel %s: %d%% of its checks", "k1", 50, exc_info=True)
        engine_log.debug("not at this level")
    finally:
        engine_log.removeHandler(handler)
        engine_log.propagate = True  # the same logger, now the builder's
    assert [kind for kind, _ in sent] == ["log"]
    with caplog.at_level(logging.INFO, logger="builder"):
        engine_handles.replay_log(sent[0][1], "engine-1")
        engine_handles.replay_log(dict(sent[0][1], levelno=logging.DEBUG), "engine-1")  # below the builder's level
    (record,) = caplog.records
    assert record.name == "builder.verify.test-engine-side" and record.levelno == logging.WARNING
    assert record.getMessage() == "kernel k1: 50% of its checks" and record.processName == "engine-1"
    assert "ValueError: the child's result was garbage" in caplog.text


def test_an_engine_logs_at_the_builders_levels(monkeypatch):
    monkeypatch.setattr(logging.getLogger("builder"), "level", logging.INFO)
    monkeypatch.setattr(logging.getLogger("builder.verify.engine.verifier"), "level", logging.DEBUG)
    levels = engine_handles.builder_log_levels()
    assert levels["builder"] == logging.INFO and levels["builder.verify.engine.verifier"] == logging.DEBUG


def test_an_engine_whose_totals_cannot_be_read_says_so_and_goes_on(caplog, monkeypatch):
    def broken(*args):
        raise KeyError("by_purpose")

    monkeypatch.setattr(engine_process, "engine_totals", broken)
    with caplog.at_level(logging.DEBUG, logger="builder.verify.engine.verifier"):
        engine_process._log_totals(None, 0.0, 3, None)  # a bench's figures: never an engine's failure
    assert [r.getMessage() for r in caplog.records] == ["engine totals unavailable: 'by_purpose'"]


class FakeConnection:
    """Records what the engine sends; hands it `messages`, then ends as the builder's pipe does when it has gone."""

    def __init__(self, messages: list | None = None) -> None:
        self.sent: list = []
        self.messages = list(messages or [])

    def send(self, message) -> None:
        self.sent.append(message)

    def recv(self):
        if not self.messages:
            raise EOFError
        return self.messages.pop(0)


class FakeReferences:
    def __init__(self) -> None:
        self.adopted: list = []

    def adopt(self, task, options, offer) -> None:
        self.adopted.append((task.id, offer))

    def share(self, task, options):
        return f"shared {task.id}" if task.id == "t1" else None  # it has only t1's reference


class FakeVerifier:
    """Hands back `unbegun`; its stream makes a record of each pair it reads."""

    def __init__(self) -> None:
        self.options = "options"
        self.references = FakeReferences()
        self.unbegun: list = []

    def hand_back(self, count: int) -> list:
        return self.unbegun[:count]

    def stream(self, pairs):
        for pair in pairs:
            if pair is not WINDOW_END:
                yield pair[0]  # a candidate stands for its record: the same identity


def kernel(task_id: str, name: str) -> SimpleNamespace:
    return SimpleNamespace(task_id=task_id, kernel_id="k", kernel_name=name)


def test_an_engine_hands_back_the_latest_sequence_of_each_pair_with_the_references_it_has():
    engine = engine_process.Engine(FakeConnection(), FakeVerifier())
    a, a_copy, b = kernel("t1", "a"), kernel("t1", "a"), kernel("t2", "b")
    t1, t2 = SimpleNamespace(id="t1"), SimpleNamespace(id="t2")
    for answer in [(7, a, t1, None), (8, a_copy, t1, "offer"), "window_end", (9, b, t2, None), None]:
        engine.answers.put(answer)
    assert list(engine.pairs()) == [(a, t1), (a_copy, t1), WINDOW_END, (b, t2)]
    assert engine.connection.sent == [("next",)] * 5  # one request per answer
    assert engine.verifier.references.adopted == [("t1", "offer")]
    engine.verifier.unbegun = [(a, t1), (b, t2), (kernel("t3", "never handed out"), SimpleNamespace(id="t3"))]
    engine.hand_back(3)
    assert engine.connection.sent[-1] == ("handed_back", [8, 9], {"t1": "shared t1"})
    assert engine.sequence_of(a_copy) == 7  # the copy still in its stream keeps the other sequence


def test_an_engine_sends_each_record_with_its_pairs_sequence_then_says_done():
    a, t1 = kernel("t1", "a"), SimpleNamespace(id="t1")
    connection = FakeConnection([(4, a, t1, None), ("hand_back", 1), None])
    engine = engine_process.Engine(connection, FakeVerifier())
    assert engine.run(started_at=0.0) == 0
    assert ("record", 4, a) in connection.sent and connection.sent[-1] == ("done",)
    assert ("handed_back", [], {}) in connection.sent  # asked as its stream ran: nothing it had not begun
