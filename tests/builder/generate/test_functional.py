"""The functional-form check runs the LLM's Python in a separate sandboxed child and compares outputs."""

from __future__ import annotations

from builder.generate.llm.functional import accepted_task, check_functional_form, write_functional_task

from .helpers import FUNCTIONAL_LINEAR_TANH

# The form also checks that the child cannot see the builder's secrets (the environment is scrubbed).
KEY_PROBE = FUNCTIONAL_LINEAR_TANH.replace(
    "def module_fn(x, weight, bias):\n",
    "def module_fn(x, weight, bias):\n    import os\n    if 'OPENAI_API_KEY' in os.environ:\n        raise RuntimeError('key visible')\n",
)


def test_matching_form_accepted_and_wrong_ones_rejected(tiny_tasks, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-functional-check-secret")
    task = tiny_tasks["1/3"]
    assert KEY_PROBE != FUNCTIONAL_LINEAR_TANH
    good = write_functional_task(task, KEY_PROBE, tmp_path)
    result = check_functional_form(task, good, "cpu")
    assert result.ok, result.reason
    assert result.isolation in ("bwrap", "process")
    accepted = accepted_task(task, good)
    assert accepted.id == task.id and accepted.has_functional and accepted.name == task.name

    wrong_op = write_functional_task(task, FUNCTIONAL_LINEAR_TANH.replace("torch.tanh(", "torch.sigmoid("), tmp_path, 1)
    result = check_functional_form(task, wrong_op, "cpu")
    assert not result.ok and "differs" in result.reason


def test_malformed_form_is_rejected_without_running(tiny_tasks, tmp_path):
    task = tiny_tasks["1/3"]
    no_fn = write_functional_task(task, FUNCTIONAL_LINEAR_TANH.replace(", fn=module_fn)", ")"), tmp_path, 2)
    result = check_functional_form(task, no_fn, "cpu")
    assert not result.ok and "fn=module_fn" in result.reason and result.isolation is None  # rejected unrun
    not_python = write_functional_task(task, "def module_fn(:\n", tmp_path, 4)
    assert "syntax error" in check_functional_form(task, not_python, "cpu").reason
