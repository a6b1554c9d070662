"""The throughput bench's kernel mix: distinct kernels made from the bundled corpus over tasks of every level
(`corpus`), and the mix repeated as copies of each kernel (`repeat_pairs`)."""

from __future__ import annotations

import secrets
from dataclasses import replace
from pathlib import Path

from builder import config
from builder.candidates import Candidate
from builder.tasks import load_suite


def corpus(backend: str, count: int, task_count: int = 16) -> list[tuple[Candidate, object]]:
    """`count` distinct candidates spread evenly over `task_count` tasks taken in turn from every level that
    has bundled kernels for this backend (a task's bundled files repeat, each copy a new kernel)."""
    suite = load_suite()
    suffix = ".cu" if backend == "cuda" else ".cpp"
    by_task: dict[tuple[int, int], list[Path]] = {}
    for path in sorted((config.CANDIDATES_DIR / backend).glob(f"level*/*/*{suffix}")):
        key = (int(path.parts[-3].removeprefix("level")), int(path.parent.name.split("_", 1)[0]))
        by_task.setdefault(key, []).append(path)
    if not by_task:
        raise SystemExit(f"no bundled {backend} candidates under {config.CANDIDATES_DIR / backend}")
    levels = sorted({level for level, _ in by_task})
    queues = {level: sorted(key for key in by_task if key[0] == level) for level in levels}
    chosen: list[tuple[int, int]] = []
    while len(chosen) < task_count and any(queues.values()):  # level 1, 2, 3, 1, 2, 3, ...
        for level in levels:
            if queues[level] and len(chosen) < task_count:
                chosen.append(queues[level].pop(0))
    tag = secrets.token_hex(4)  # a fresh tag per run: nothing is served from an earlier run's cache
    pairs = []
    for index in range(count):
        key = chosen[index % len(chosen)]
        files = by_task[key]
        path = files[(index // len(chosen)) % len(files)]
        task = suite.get(f"{key[0]}/{key[1]}")
        source = path.read_text() + f"\n// benchmark variant {tag}-{index}\n"
        pairs.append((Candidate(task_id=task.id, source=source, language="cuda" if backend == "cuda" else "cpp",
                                kernel_name=f"{path.stem}-{index}", generator="bundled"), task))  # fmt: skip
    return pairs


def repeat_pairs(pairs: list, times: int) -> list:
    """The mix `times` over, in turn: each copy the same source (its build a cache hit), under a name of its own
    whose kernel part (before the last "-") is the kernel's, so `copy_agreement` groups the copies with it."""
    if times <= 1:
        return list(pairs)
    return [(replace(c, kernel_name=f"{c.kernel_name}.{k}"), t) for k in range(times) for c, t in pairs]
