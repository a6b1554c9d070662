"""Fresh children forked from the evaluation children's zygote (`children.fork_fresh`): the clean reference's child
where the zygote is up, an exec'd one where it is not (the pool itself: tests/builder/verify/test_engine.py)."""

from __future__ import annotations

import threading
import time

import pytest

from builder import config
from builder.tasks import load_suite
from builder.verify.engine import children
from builder.verify.engine.children import child_env
from builder.verify.engine.clean_reference import compute_clean_reference
from builder.verify.options import VerifyOptions
from builder.verify.protocol.entry_points import CHILD_MODULE
from builder.verify.sandbox import forked
from builder.verify.sandbox.pool import EvalPool
from tests.builder.verify.test_forked import needs_bwrap


def test_a_device_reserve_option_reaches_the_childrens_environment(monkeypatch):
    from builder.verify.child.main import device_reserve_bytes

    name = config.EVAL_DEVICE_RESERVE_ENV
    assert name not in child_env(VerifyOptions(backend="cuda"))  # the child takes the config's
    monkeypatch.delenv(name, raising=False)
    assert device_reserve_bytes() == config.EVAL_DEVICE_RESERVE_BYTES
    for chosen in (0, 256 << 20):
        env = child_env(VerifyOptions(backend="cuda", device_reserve_bytes=chosen))
        monkeypatch.setenv(name, env[name])  # as the sandbox gives it to the child
        assert device_reserve_bytes() == chosen
    assert child_env(VerifyOptions(backend="cpu", device_reserve_bytes=0)) == {"CUDA_VISIBLE_DEVICES": ""}


def test_the_work_queues_reach_the_childrens_environment():
    # The driver reads it when the child makes its CUDA context: the config's count unless the options say
    # otherwise; 0 leaves it unset, and the child gets the driver's default.
    default = child_env(VerifyOptions(backend="cuda"))
    assert default["CUDA_DEVICE_MAX_CONNECTIONS"] == str(config.EVAL_DEVICE_CONNECTIONS)
    assert child_env(VerifyOptions(backend="cuda", device_connections=4))["CUDA_DEVICE_MAX_CONNECTIONS"] == "4"
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in child_env(VerifyOptions(backend="cuda", device_connections=0))
    assert child_env(VerifyOptions(backend="cpu", device_connections=2)) == {"CUDA_VISIBLE_DEVICES": ""}


def test_no_zygote_is_waited_for_nor_started():
    assert forked.running_zygote("tests.fixtures.sandbox.none_started") is None
    held = threading.Event()
    done = threading.Event()

    def hold_the_lock() -> None:  # as a zygote's start holds it, for seconds of imports
        with forked._zygotes_lock:
            held.set()
            done.wait(10)

    threading.Thread(target=hold_the_lock, daemon=True).start()
    assert held.wait(5)
    try:
        assert forked.running_zygote(CHILD_MODULE) is None  # at once: exec'd instead
    finally:
        done.set()


@needs_bwrap
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_clean_reference_forked_from_the_running_zygote_is_the_exec_d_ones(tmp_path, monkeypatch):
    made: list[forked.ForkedProcess] = []

    class CountedFork(forked.ForkedProcess):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(children, "ForkedProcess", CountedFork)
    task = load_suite().get("1/1")
    options = VerifyOptions(backend="cpu", seeds=[11, 12], trials=2, timeout_s=120, fork_references=True)
    exec_d = compute_clean_reference(task, options, tmp_path / "exec")
    assert exec_d.error is None, exec_d.error
    assert made == []  # no zygote up: the child was exec'd, not kept waiting for one
    assert forked._key(CHILD_MODULE, child_env(options)) not in forked._zygotes  # nor one started for it
    key = forked._key(CHILD_MODULE, child_env(options))
    with EvalPool(1, gpu=False, env_extra=child_env(options), child_module=CHILD_MODULE):  # its zygote starts
        assert forked._users[key] == 1
        forked_reference = compute_clean_reference(task, options, tmp_path / "forked")
        assert forked._users[key] == 1  # the reference's child gave the zygote back once it had ended
    assert forked_reference.error is None, forked_reference.error
    references = [child for child in made if child.scratch.name.startswith(config.SCRATCH_PREFIXES["reference"])]
    assert len(references) == 1 and references[0].proc.poll() is not None  # forked; its sandbox went with it

    def shared(manifest: dict) -> dict:  # the timed calls to sample are drawn afresh, in secret, for each reference
        return {key: value for key, value in manifest.items() if key != "timed_samples"}

    assert shared(forked_reference.manifest) == shared(exec_d.manifest)
    shown = ("timed", "index.json")  # the sampled calls' outputs, and the index that lists them, differ by design
    names = sorted(path.name for path in (tmp_path / "exec").iterdir() if not path.name.startswith(shown))
    assert names and names == sorted(p.name for p in (tmp_path / "forked").iterdir() if not p.name.startswith(shown))
    for name in names:  # the same outputs, bit for bit
        assert (tmp_path / "exec" / name).read_bytes() == (tmp_path / "forked" / name).read_bytes(), name


@needs_bwrap
def test_options_that_fork_no_children_fork_no_reference(tmp_path):
    options = VerifyOptions(backend="cpu", seeds=[11], trials=1, fork_children=False, fork_references=True)
    job = {"result_path": str(tmp_path / "result.json")}
    with EvalPool(1, gpu=False, env_extra=child_env(options), child_module=CHILD_MODULE):  # a zygote is up
        assert children.fork_fresh(job, tmp_path, options, ()) is None


FAKE_CHILD = "tests.fixtures.sandbox.fake_child"


def _eventually(condition, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _refill_threads(evaluations: EvalPool) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"ka-pool-refill-{id(evaluations):x}"]


@pytest.mark.parametrize("fork", [None, False], ids=["forked where bwrap is", "exec-d"])
def test_a_taken_childs_replacement_waits_for_the_first_reference(fork):
    first_reference = threading.Event()
    with EvalPool(1, gpu=False, child_module=FAKE_CHILD, fork=fork, refill_after=first_reference) as evaluations:
        taken = evaluations.take()
        time.sleep(0.5)
        assert evaluations.started_count == 1  # nothing started beside the first references
        second = evaluations.take()  # none waiting: a worker that asks gets a fresh child at once
        assert evaluations.started_count == 2 and len(_refill_threads(evaluations)) == 1  # one waiting refill, not two
        first_reference.set()
        assert _eventually(lambda: evaluations.started_count == 3)
        # A forked child's sandbox dies with the thread that started it (bwrap --die-with-parent): the
        # replacement must outlive the moment it was started, until it is taken.
        time.sleep(1.0)
        third = evaluations.take()  # the replacement, started before it was asked for
        assert third.process.alive() and evaluations.started_count == 4  # and its own replacement at once
        for child in (taken, second, third):
            child.discard()
    assert _eventually(lambda: not _refill_threads(evaluations), 5)  # the refill thread ends with the pool


def test_a_pool_closed_before_the_first_reference_starts_no_replacement():
    first_reference = threading.Event()
    evaluations = EvalPool(1, gpu=False, child_module=FAKE_CHILD, refill_after=first_reference)
    taken = evaluations.take()
    evaluations.close()
    taken.discard()
    assert _eventually(lambda: not _refill_threads(evaluations), 5)  # the waiting refill ended with the pool
    first_reference.set()
    time.sleep(0.3)
    assert evaluations.started_count == 1


def test_without_an_event_the_replacement_starts_at_once():
    with EvalPool(1, gpu=False, child_module=FAKE_CHILD) as evaluations:
        taken = evaluations.take()
        assert evaluations.started_count == 2 and not _refill_threads(evaluations)
        taken.discard()
