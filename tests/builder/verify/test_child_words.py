"""The child's side of its words with the parent: a child whose parent is gone stops waiting for a word."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from builder import config

WAITER = """
import sys
from pathlib import Path
from builder.verify.child import words as child_words
Path(sys.argv[1]).write_text("waiting")
print(child_words.await_word(sys.argv[2]))
"""
# Starts the waiter, answers with its pid once it waits, and then exits itself unless told to stay and answer it.
STARTER = """
import subprocess, sys, time
from pathlib import Path
waiting, word, stay = Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4] == "stay"
waiter = subprocess.Popen([sys.executable, "-c", sys.argv[1], str(waiting), str(word)], start_new_session=True,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
while not waiting.exists():
    time.sleep(0.01)
print(waiter.pid, flush=True)
if stay:
    time.sleep(0.5)
    word.write_text("go")
    waiter.wait(timeout=30)
    print(waiter.returncode)
"""


def start(tmp_path, stay: bool) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(config.REPO_ROOT))
    argv = [sys.executable, "-c", STARTER, WAITER, str(tmp_path / "waiting"), str(tmp_path / "go"),
            "stay" if stay else "leave"]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=True)


def test_a_child_whose_parent_is_gone_stops_waiting_for_its_word(tmp_path):
    pid = int(start(tmp_path, stay=False).stdout.split()[0])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie":
        time.sleep(0.05)
    alive = psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    if alive:
        psutil.Process(pid).kill()
    assert not alive, "an orphaned child kept waiting for a word no parent will write"


def test_a_child_whose_parent_lives_waits_for_the_word(tmp_path):
    lines = start(tmp_path, stay=True).stdout.split()
    assert lines[-1] == "0"  # it waited past the parent's half second and ended on the word
