"""The throughput bench's mix repeats each bundled kernel as copies: its copy figures say whether a loaded machine
moved a verdict or a speedup between copies of one kernel."""

from __future__ import annotations

from types import SimpleNamespace

from benchmarks import throughput_figures as figures
from benchmarks import throughput_mix as mix


def record(task_id: str, name: str, status: str, speedup: float | None = None) -> SimpleNamespace:
    return SimpleNamespace(task_id=task_id, kernel_name=name, status=status, speedup_eager=speedup)


def test_copies_are_grouped_by_task_and_kernel_and_judged_against_their_median():
    records = [
        record("1/1", "tiled-0", "correct", 1.00), record("1/1", "tiled-16", "correct", 1.04),
        record("1/1", "tiled-32", "correct", 1.20),  # 15 % off its kernel's median
        record("1/2", "tiled-1", "incorrect"), record("1/2", "tiled-17", "correct", 2.0),  # same name, other task
        record("1/3", "naive-2", "correct", 1.0),  # one copy: not counted
    ]  # fmt: skip
    assert figures.copy_agreement(records) == {
        "copies: kernels with copies": 2,
        "copies: kernels with one verdict in every copy": 1,
        "copies: correct copies timed": 3,
        "copies: speedups within 5 % of their kernel's median": 2,
    }
    assert figures.copy_agreement(records[-1:]) == {}


def test_a_repeated_mix_runs_each_source_again_under_names_grouped_with_their_kernel():
    from builder.candidates import Candidate

    pairs = [(Candidate(task_id="1/1", source="a", language="cuda", kernel_name="tiled-0"), "task 1/1"),
             (Candidate(task_id="1/2", source="b", language="cuda", kernel_name="naive-1"), "task 1/2")]  # fmt: skip
    assert mix.repeat_pairs(pairs, 1) == pairs
    repeated = mix.repeat_pairs(pairs, 3)
    assert [c.kernel_name for c, _ in repeated] == ["tiled-0.0", "naive-1.0", "tiled-0.1", "naive-1.1", "tiled-0.2",
                                                    "naive-1.2"]  # fmt: skip
    assert [(c.source, t) for c, t in repeated] == [("a", "task 1/1"), ("b", "task 1/2")] * 3  # builds hit the cache
    records = [record(c.task_id, c.kernel_name, "correct", 1.0) for c, _ in repeated]
    assert figures.copy_agreement(records)["copies: kernels with copies"] == 2
