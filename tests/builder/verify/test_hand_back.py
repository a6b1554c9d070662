"""The end of a stream over several engines (builder/verify/engine/hand_back.py): windows an engine's input closes early,
the queue pairs are taken back from, and how many an engine hands back."""

from __future__ import annotations

import threading

import pytest

from builder import config
from builder.verify.engine.hand_back import WINDOW_END, UnstartedWork, hand_back_size, read_window, worth_waiting


def test_a_window_ends_at_its_size_at_a_window_end_or_at_the_inputs_end():
    source = iter([1, 2, 3, WINDOW_END, WINDOW_END, 4, 5])
    assert read_window(source, 2) == [1, 2]
    assert read_window(source, 2) == [3]  # closed early: the rest is built meanwhile
    assert read_window(source, 2) == []  # closed with nothing in it: not the end
    assert read_window(source, 5) == [4, 5]
    assert read_window(source, 5) is None


def test_each_item_of_a_window_is_seen_before_the_next_is_read():
    seen: list = []

    def source():
        for item in (1, 2, WINDOW_END, 3):
            yield item
            if item is not WINDOW_END:
                assert seen[-1] == item  # seen as it came, not once the window was full

    items = source()
    assert read_window(items, 5, seen.append) == [1, 2]
    assert read_window(items, 5, seen.append) == [3]
    assert seen == [1, 2, 3]  # a window's end is not an item


def queued(*items) -> UnstartedWork:
    work = UnstartedWork(maxsize=len(items))
    for item in items:
        work.put(item)
    return work


def task_of(item):
    return item[0]


def test_pairs_are_taken_back_from_the_task_with_most_queued_the_last_queued_first():
    work = queued(("a", 1), ("b", 1), ("a", 2), ("b", 2), ("b", 3), "end", "end")
    taken = work.take_back(4, eligible=lambda item: item != "end", group=task_of)
    assert taken == [("b", 3), ("b", 2), ("b", 1), ("a", 2)]
    assert [work.get_nowait() for _ in range(work.qsize())] == [("a", 1), "end", "end"]  # the workers' order kept


def test_only_eligible_pairs_go_back_and_copies_that_compare_equal_are_told_apart():
    first, copy = ["same"], ["same"]  # equal, not the same item
    work = queued(first, copy, ["built-not"])
    taken = work.take_back(1, eligible=lambda item: item != ["built-not"], group=lambda item: 0)
    assert taken == [copy] and taken[0] is copy
    rest = [work.get_nowait(), work.get_nowait()]
    assert rest[0] is first and rest[1] == ["built-not"]


def test_taking_back_makes_room_for_a_build_waiting_to_be_queued():
    work = queued(1, 2)
    put = threading.Thread(target=work.put, args=(3,), daemon=True)
    put.start()
    assert work.take_back(1, eligible=lambda item: True, group=lambda item: 0) == [2]
    put.join(timeout=5)
    assert not put.is_alive() and work.qsize() == 2


def test_a_pair_goes_either_to_a_worker_or_back_never_both():
    items = [("t", n) for n in range(2000)]
    work = queued(*items)
    got: list = []

    def worker():
        while True:
            try:
                got.append(work.get_nowait())
            except Exception:  # noqa: BLE001 - empty: done
                return

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    back = []
    for _ in range(200):
        back += work.take_back(3, eligible=lambda item: True, group=task_of)
    for thread in threads:
        thread.join()
    assert sorted(got + back) == items


@pytest.mark.parametrize(("taker", "giver", "expected"), [
    (9, 40, 0),  # the taker still has more than its workers evaluate at once
    (8, 40, 16),  # half the giver's surplus over its workers
    (0, 17, 4),
    (0, 15, 0),  # less than a hand-back's least: the taker's clean reference would cost more
])  # fmt: skip
def test_an_engine_hands_back_half_its_surplus_once_the_taker_runs_low(monkeypatch, taker, giver, expected):
    monkeypatch.setattr(config, "ENGINE_HAND_BACK_MIN_PAIRS", 4)
    assert hand_back_size(taker, giver, workers=8) == expected
    assert worth_waiting(giver, workers=8) == (giver >= 16)
