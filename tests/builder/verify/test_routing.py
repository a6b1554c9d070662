"""Which engine gets which pair (builder/verify/engine/routing.py): pairs handed out by task, in the input's order,
no engine running away from the others, the last pairs to the least loaded."""

from __future__ import annotations

from types import SimpleNamespace

from builder import config
from builder.verify.engine import routing


class FakeTask:
    def __init__(self, task_id: str) -> None:
        self.id = task_id


def pairs_of(*task_ids: str) -> list[tuple[str, FakeTask]]:
    return [(f"p{index}", FakeTask(task_id)) for index, task_id in enumerate(task_ids)]


def test_an_engine_takes_its_own_and_new_tasks_in_the_inputs_order():
    # Interleaved input: each engine goes through its tasks side by side, not one task's pairs first.
    router = routing.Router(pairs_of("a", "b", "c", "d", "a", "b", "c", "d"), lookahead=8)
    assert [router.next_for(0)[0], router.next_for(1)[0]] == ["p0", "p1"]  # a -> 0, b -> 1
    assert router.next_for(0)[0] == "p2"  # c, nobody's yet, comes before a's next pair (p4)
    assert router.next_for(0)[0] == "p3"  # and d
    assert router.next_for(0)[0] == "p4"  # then a, its own, skipping nothing of its own
    assert router.next_for(1)[0] == "p5"  # b is engine 1's; c and d (engine 0's) are passed over
    assert [router.next_for(0)[0], router.next_for(0)[0]] == ["p6", "p7"]
    assert router.next_for(1) is None


def test_two_engines_split_the_tasks_evenly_whoever_asks_first():
    router = routing.Router(pairs_of("a", "b", "c", "d", "a", "b", "c", "d"), lookahead=8, engines=2)
    assert [router.next_for(0)[0], router.next_for(0)[0]] == ["p0", "p4"]  # a task ahead of engine 1: its own
    assert [router.next_for(1)[0], router.next_for(1)[0]] == ["p1", "p2"]  # b, then c (level, it may claim)
    assert router.next_for(0)[0] == "p3"  # d: one task behind, engine 0 claims again
    assert [router.next_for(1)[0], router.next_for(1)[0], router.next_for(0)[0]] == ["p5", "p6", "p7"]


def test_an_engine_out_of_its_own_pairs_shares_one_task_before_another():
    router = routing.Router(pairs_of("a", "b", "c", "b", "c", "b"), lookahead=6, engines=2)
    assert [router.next_for(0)[0], router.next_for(1)[0], router.next_for(1)[0]] == ["p0", "p1", "p2"]
    assert router.next_for(0)[0] == "p3"  # nothing of its own or nobody's: engine 1's b, the first waiting
    assert router.next_for(0)[0] == "p5"  # b again, past c: one more clean reference, not two


def engine_state(pending: int, asking: bool = False, asked_s_ago: float = 0.0, told_end: bool = False,
                 has_asked: bool = True):  # fmt: skip
    return SimpleNamespace(pending=[None] * pending, ended=False, told_end=told_end, asking=asking,
                           asked_at=100.0 - asked_s_ago, has_asked=has_asked)  # fmt: skip


def test_the_last_pairs_go_to_the_least_loaded_engine_that_wants_them():
    busy, other = engine_state(20), engine_state(10, asking=True)
    assert routing.balanced(busy, [busy, other], last_pairs=False, slack=16, now=100.0)  # a build's slack
    assert not routing.balanced(busy, [busy, other], last_pairs=True, slack=16, now=100.0)  # none at the end
    other.asking = False  # between two of its requests: still reading its window, so still held back for
    assert not routing.balanced(busy, [busy, other], last_pairs=True, slack=16, now=100.0)
    other.asked_at -= config.ENGINE_READING_S + 0.1  # its window read, it waits for room: nobody waits for it
    assert routing.balanced(busy, [busy, other], last_pairs=True, slack=16, now=100.0)
    starting = engine_state(0, asked_s_ago=config.ENGINE_READING_S + 1, has_asked=False)  # spawned, not yet asking
    assert not routing.balanced(busy, [busy, starting], last_pairs=True, slack=16, now=100.0)  # no runaway
    level = engine_state(10)
    assert routing.balanced(level, [level, engine_state(10, asking=True)], last_pairs=True, slack=16, now=100.0)


def test_an_engine_silent_too_long_or_told_the_end_holds_nobody_back():
    engine = engine_state(40)
    silent = engine_state(0, asked_s_ago=config.ENGINE_BALANCE_WAIT_S + 1)
    assert routing.balanced(engine, [engine, silent], last_pairs=False, slack=16, now=100.0)
    assert routing.balanced(engine, [engine, engine_state(0, told_end=True)], False, 16, now=100.0)
    assert not routing.balanced(engine, [engine, engine_state(0, asked_s_ago=1.0)], False, 16, now=100.0)


def test_an_engine_keeps_its_tasks_and_takes_new_ones_before_others():
    router = routing.Router(pairs_of("a", "b", "a", "b", "c"), lookahead=5)
    assert router.next_for(0)[0] == "p0"  # a -> engine 0
    assert router.next_for(1)[0] == "p1"  # a is engine 0's: b, nobody's yet -> engine 1
    assert router.next_for(1)[0] == "p3"  # engine 1 keeps b
    assert router.next_for(1)[0] == "p4"  # then a new task (c)
    assert router.next_for(1)[0] == "p2"  # then, rather than idle, engine 0's
    assert router.next_for(0) is None


def test_a_pair_given_back_goes_out_first_and_leaves_the_stream_unfinished():
    router = routing.Router(pairs_of("a", "a"), lookahead=1)
    first = router.next_for(0)
    router.give_back(first)
    assert router.next_for(1) is first
    router.give_back(first)
    assert router.unfinished()
    assert [router.next_for(0)[0], router.next_for(0)[0], router.next_for(0)] == ["p0", "p1", None]
    assert not router.unfinished()


def test_a_pair_is_in_transit_from_the_router_until_delivered_or_given_back_undelivered():
    router = routing.Router(pairs_of("a", "a"), lookahead=2)
    first, second = router.next_for(0), router.next_for(1)
    assert router.in_transit()
    router.delivered()
    assert router.in_transit()  # the second is still on its way
    router.give_back(second, undelivered=True)
    assert not router.in_transit() and router.next_for(0) is second
    router.give_back(first)  # handed back from an engine's pending pairs: never counted twice
    assert router.in_transit()  # the second, taken again just now


def test_the_router_reads_its_input_only_as_far_as_it_looks_ahead():
    read = []

    def source():
        for pair in pairs_of("a", "b", "c", "d"):
            read.append(pair[0])
            yield pair

    router = routing.Router(source(), lookahead=2)
    router.next_for(0)
    assert read == ["p0", "p1"]


def test_an_engine_ahead_of_the_least_loaded_by_more_than_a_build_waits():
    assert routing.within_reach(18, [2, 40], slack=16)
    assert not routing.within_reach(19, [2, 40], slack=16)  # the first engine up would take it all
    assert routing.within_reach(500, [], slack=16)  # the only one still asking
