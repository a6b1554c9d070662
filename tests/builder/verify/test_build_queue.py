"""The build queue's start: how many builds run side by side before the first kernel is built."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from builder.verify.compile.build_queue import BuildQueue


class SideBySide:
    """Builds that hold their worker until released, counting how many ran at once."""

    def __init__(self) -> None:
        self.lock, self.release = threading.Lock(), threading.Event()
        self.running = self.most = 0

    def build(self, _: int) -> None:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        self.release.wait(10)
        with self.lock:
            self.running -= 1

    def wait_for(self, count: int) -> bool:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.running == count:
                return True
            time.sleep(0.01)
        return False


def test_at_the_start_only_the_limit_builds_side_by_side_then_every_worker():
    builds, ended = SideBySide(), []
    with ThreadPoolExecutor(4) as pool:
        queue = BuildQueue(pool, start_limit=2)
        for number in range(4):
            queue.submit((0, number), builds.build, number, ended.append)
        assert builds.wait_for(2)
        time.sleep(0.3)  # the other two workers have their turns and must not start a build
        assert builds.running == 2 and builds.most == 2
        queue.end_start()
        assert builds.wait_for(4)
        builds.release.set()
    assert ended == [None] * 4


def test_a_start_that_never_ends_still_builds_everything_at_the_limit():
    """No build gives the device work (every candidate fails): the builds still all run, the limit at a time."""
    builds, ended = SideBySide(), []
    builds.release.set()
    with ThreadPoolExecutor(3) as pool:
        queue = BuildQueue(pool, start_limit=1)
        for number in range(6):
            queue.submit((0, number), builds.build, number, ended.append)
    assert ended == [None] * 6 and builds.most == 1


def test_without_a_limit_every_worker_builds_from_the_first_turn():
    builds = SideBySide()
    with ThreadPoolExecutor(3) as pool:
        queue = BuildQueue(pool)
        for number in range(3):
            queue.submit((0, number), builds.build, number, lambda error: None)
        assert builds.wait_for(3)
        builds.release.set()
