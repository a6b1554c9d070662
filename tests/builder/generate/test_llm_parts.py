"""Small parts of the LLM loop: parent ranking, the innovation archive, the budget tracker."""

from __future__ import annotations

from builder.generate.llm.archive import InnovationArchive, similarity
from builder.generate.llm.budgets import BudgetTracker
from builder.generate.llm.loop import rank_key
from builder.generate.llm.settings import Budget


def rec(
    task_id="1/1", status="correct", eligible=True, runtime=None, max_diff=None, name="relu", category="activation"
):
    return {
        "task_id": task_id,
        "status": status,
        "ranking_eligible": eligible,
        "runtime_ms": runtime,
        "max_diff": max_diff,
        "language": "cpp",
        "cuda_code": f"// {task_id} {runtime}",
        "op_name": name,
        "op_category": category,
    }


def test_rank_prefers_fast_eligible_then_flagged_then_close_misses():
    records = [
        rec(status="compile_error"),
        rec(status="incorrect", eligible=False, max_diff=0.5),
        rec(runtime=2.0),
        rec(status="runtime_error", eligible=False),
        rec(runtime=3.0, eligible=False),
        rec(status="incorrect", eligible=False, max_diff=0.01),
        rec(runtime=1.0),
    ]
    ordered = sorted(records, key=rank_key)
    assert [(r["status"], r["runtime_ms"], r["max_diff"]) for r in ordered] == [
        ("correct", 1.0, None),
        ("correct", 2.0, None),
        ("correct", 3.0, None),
        ("incorrect", None, 0.01),
        ("incorrect", None, 0.5),
        ("runtime_error", None, None),
        ("compile_error", None, None),
    ]


def test_archive_keeps_the_fastest_eligible_kernel_of_similar_tasks():
    archive = InnovationArchive()
    archive.offer(rec("1/19", runtime=2.0), "relu", "activation", "s")
    archive.offer(rec("1/19", runtime=1.0), "relu", "activation", "s")
    archive.offer(rec("1/19", runtime=0.5, eligible=False), "relu", "activation", "s")  # flagged: not an example
    archive.offer(rec("1/27", runtime=1.0), "softmax", "softmax", "s")
    archive.offer(rec("1/1", runtime=1.0), "square_matmul", "matmul", "s")
    examples = archive.examples_for("1/25", "leaky_relu", "activation", "cpp")
    assert [(e.task_id, e.runtime_ms) for e in examples] == [("1/19", 1.0)]
    assert archive.examples_for("1/19", "relu", "activation", "cpp") == []  # never the task's own kernels
    assert archive.examples_for("1/25", "leaky_relu", "activation", "cuda") == []  # same language only
    assert similarity("gemm_bias_relu", "gemm_epilogue", "gemm_relu", "gemm_epilogue") > similarity(
        "gemm_bias_relu", "gemm_epilogue", "softmax", "softmax"
    )


def test_budget_tracker():
    tracker = BudgetTracker(Budget(max_total_tokens=300, max_cost_usd=1.0))
    tracker.charge(100, 100, 0.5)
    assert tracker.exhausted() is None
    tracker.charge(50, 50, 0.1)
    assert "token budget" in tracker.exhausted()
    unlimited = BudgetTracker(Budget())
    unlimited.charge(10**9, 10**9, None)
    assert unlimited.exhausted() is None and unlimited.summary()["requests"] == 1
