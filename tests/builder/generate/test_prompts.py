"""Prompt rendering and the feedback a verified parent gives the next round."""

from __future__ import annotations

import json

import pytest

from builder.candidates import Candidate
from builder.errors import UsageError
from builder.generate.llm import prompts
from schemas import flag_vocabulary

from .helpers import make_record


def record(tiny_tasks, status, **fields):
    candidate = Candidate(task_id="1/1", source="// k", language="cuda", kernel_name="k")
    return make_record(candidate, tiny_tasks["1/1"], status, backend="cuda", **fields)


def test_feedback_reads_timing_ncu_and_clang_tidy(tiny_tasks):
    tidy = {
        "diagnostics": [
            {
                "line": 12,
                "column": 3,
                "check": "bugprone-integer-division",
                "severity": "warning",
                "message": "result of integer division used in a floating point context",
            }
        ],
        "counts": {"warning": 1},
    }
    ncu = {"kernels": [], "rules": [{"message": "Uncoalesced global accesses: 4x more sectors than needed"}]}
    parent = record(
        tiny_tasks,
        "correct",
        runtime_ms=2.0,
        eager_ms=3.0,
        compile_ms=1.5,
        speedup_eager=1.5,
        speedup_compile=0.75,
        ncu_sm_pct=41.0,
        ncu_dram_pct=88.5,
        ncu_occupancy_pct=30.0,
        ncu_registers=96,
        torch_own_fraction=0.9,
        ncu_profile=json.dumps(ncu),
        clang_tidy=json.dumps(tidy),
        flags=["degenerate_task"],
    )
    text = prompts.feedback(parent)
    assert "2 ms (median); PyTorch eager 3 ms -> 1.5x; torch.compile 1.5 ms -> 0.75x" in text
    assert "DRAM throughput 88.5%" in text and "registers/thread 96" in text
    assert "Uncoalesced global accesses" in text
    assert "line 12: warning: result of integer division" in text and "bugprone-integer-division" in text
    assert "Flag `degenerate_task`" in text and "90%" in text
    assert "flags above" in prompts.goal(parent)


def test_feedback_of_failures(tiny_tasks):
    compile_fail = record(tiny_tasks, "compile_error", error='x.cu(3): error: identifier "foo" is undefined')
    assert 'identifier "foo" is undefined' in prompts.feedback(compile_fail)
    assert "compile errors" in prompts.goal(compile_fail)
    wrong = record(
        tiny_tasks,
        "incorrect",
        max_diff=0.5,
        mean_diff=0.01,
        atol=1e-4,
        rtol=1e-4,
        trials=5,
        flags=["uninitialized_output"],
    )
    text = prompts.feedback(wrong)
    # The flag is explained in the schema's own words (whatever they are), so the model learns what it means.
    assert "max |diff| 0.5" in text and flag_vocabulary()["uninitialized_output"]["text"] in text
    long_error = record(tiny_tasks, "runtime_error", error="e" * 10_000)
    assert "more characters cut" in prompts.feedback(long_error)


def test_render_is_single_pass_and_strict(tmp_path):
    (tmp_path / "t.md").write_text("A {{x}} B {{ y }}")
    assert prompts.render("t", {"x": "{{y}}", "y": "2"}, tmp_path) == "A {{y}} B 2"
    with pytest.raises(UsageError, match=r"t\.md uses field\(s\) the loop does not provide: y"):
        prompts.render("t", {"x": 1}, tmp_path)
    with pytest.raises(UsageError, match="prompt template missing"):
        prompts.render("absent", {}, tmp_path)
