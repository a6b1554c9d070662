"""The engine process's side (`engine_process.py`): its entry point and the log records it sends the builder."""

from __future__ import annotations

import logging

from builder.verify.engine import engine_handles, engine_process


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
