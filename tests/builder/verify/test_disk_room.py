"""Room on the scratch disk: an evaluation child starts only where the disk has room for the outputs it will write,
counting what the children started before it reserved (the disk's free space is replaced by a figure the test sets)."""

from __future__ import annotations

import threading
import time

import pytest

from builder import config
from builder.verify.engine import disk_room
from builder.verify.engine.disk_room import DiskRoom

GIB = 1 << 30


@pytest.fixture
def disk(monkeypatch):
    """The disk's free bytes, as the test sets them."""
    state = {"free": 10 * GIB}
    monkeypatch.setattr(disk_room, "free_bytes", lambda path: state["free"])
    monkeypatch.setattr(config, "DISK_ROOM_POLL_S", 0.02)
    return state


def started(room: DiskRoom, nbytes: int, release: threading.Event, order: list[str], name: str) -> threading.Thread:
    def child():
        with room.reserved(nbytes):
            order.append(name)
            release.wait(5)

    thread = threading.Thread(target=child, daemon=True)
    thread.start()
    return thread


def test_room_is_the_share_of_the_free_space_above_the_floor_less_what_is_reserved(disk):
    room = DiskRoom("/scratch", share=0.5, floor_bytes=2 * GIB)
    assert room.room() == 4 * GIB
    with room.reserved(GIB):
        assert room.room() == 3 * GIB
        disk["free"] = 4 * GIB  # the children's files written so far, and anyone else's
        assert room.room() == 0
    assert room.room() == GIB


def test_a_child_waits_until_those_before_it_end_and_the_disk_has_room_again(disk):
    room = DiskRoom("/scratch", floor_bytes=2 * GIB)
    first_done, second_done, order = threading.Event(), threading.Event(), []
    first = started(room, 6 * GIB, first_done, order, "first")
    time.sleep(0.1)
    second = started(room, 6 * GIB, second_done, order, "second")
    time.sleep(0.2)
    assert order == ["first"]  # 8 GiB above the floor, 6 of them reserved
    first_done.set()
    first.join(5)
    second_done.set()
    second.join(5)
    assert order == ["first", "second"] and room.waits == 1 and room.waited_s > 0.1
    assert room.room() == 8 * GIB


def test_space_freed_by_others_lets_a_waiting_child_start_before_those_before_it_end(disk):
    room = DiskRoom("/scratch", floor_bytes=2 * GIB)
    first_done, second_done, order = threading.Event(), threading.Event(), []
    started(room, 6 * GIB, first_done, order, "first")
    time.sleep(0.1)
    disk["free"] = 20 * GIB  # a reference dropped, another engine's children gone
    second = started(room, 6 * GIB, second_done, order, "second")
    time.sleep(0.2)
    assert order == ["first", "second"]
    first_done.set()
    second_done.set()
    second.join(5)


def test_a_child_with_none_before_it_starts_on_a_disk_too_small_for_it(disk):
    disk["free"] = GIB
    room = DiskRoom("/scratch", floor_bytes=2 * GIB)
    with room.reserved(8 * GIB):
        assert room.room() < 0
    assert room.waits == 0
