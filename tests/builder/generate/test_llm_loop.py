"""The LLM loop against a loopback OpenAI-compatible server, driven by a fake verifier."""

from __future__ import annotations

import dataclasses
import json
import logging

import pytest

from builder.errors import UsageError
from builder.generate import drive
from builder.generate.llm import Budget, LLMGenerator, LLMSettings, ModelSpec
from builder.generate.llm.client import ChatClient
from builder.generate.llm.functional import FunctionalCheck

from .helpers import FUNCTIONAL_LINEAR_TANH, make_record

COMPILER_ERROR = "kernel.cpp:7:5: error: 'acc' was not declared in this scope"


def kernel(marker: str, body: str = "out[i] = in[i];") -> str:
    return (
        "Here is the kernel.\n\n```cpp\n#include <torch/extension.h>\n"
        f"// {marker}\n"
        "torch::Tensor forward(torch::Tensor x) {\n  auto out = torch::empty_like(x);\n"
        f"  {body}\n  return out;\n}}\n"
        'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "k"); }\n```\nDone.'
    )


def fake_verifier(tasks):
    """Verdict by marker in the source, as the real verifier would report it."""

    def verify(candidates):
        records = []
        for c in candidates:
            task = tasks[c.task_id]
            if c.source.startswith("#error"):
                records.append(make_record(c, task, "compile_error", error="#error no usable code"))
            elif "BROKEN" in c.source:
                records.append(make_record(c, task, "compile_error", error=COMPILER_ERROR))
            elif "WRONG" in c.source:
                records.append(
                    make_record(c, task, "incorrect", max_diff=3.5, mean_diff=0.7, atol=1e-4, rtol=1e-4, trials=5)
                )
            else:
                runtime = 1.0 if "FAST" in c.source else 2.0
                records.append(
                    make_record(c, task, "correct", runtime_ms=runtime, eager_ms=3.0, speedup_eager=3.0 / runtime)
                )
        return records

    return verify


def settings(url, budget=None, models=("scripted-model",), key="sk-loopback-key", **prices):
    specs = tuple(ModelSpec(name=m, base_url=url, api_key=key, **prices) for m in models)
    return LLMSettings(
        models=specs, budget=budget or Budget(rounds=2, samples_per_round=1, concurrency=1), experiment="exp-test"
    )


def fast_retry_client(spec, max_tokens):
    return ChatClient(
        spec, default_max_tokens=max_tokens, attempts=3, initial_wait_s=0.01, max_wait_s=0.02, timeout_s=10
    )


def generator(cfg, tmp_path, **kwargs):
    return LLMGenerator(cfg, backend="cpu", out_dir=tmp_path, client_factory=fast_retry_client, **kwargs)


def test_compiler_error_of_round_0_reaches_round_1_prompt(loopback, tiny_tasks, tmp_path):
    server = loopback(lambda req, i: kernel("BROKEN", "out[i] = acc;") if i == 0 else kernel("FIXED"))
    gen = generator(settings(server.url), tmp_path)
    records = drive(gen, [tiny_tasks["1/1"]], fake_verifier(tiny_tasks))
    assert [r.status for r in records] == ["compile_error", "correct"]
    round1 = server.user_prompts()[1]
    assert COMPILER_ERROR in round1
    assert "out[i] = acc;" in round1  # the parent's code
    assert "compile_error" in round1
    assert records[1].parent_ids == [records[0].kernel_id]
    assert records[1].round == 1 and records[0].round == 0
    assert records[1].model == "scripted-model" and records[1].experiment == "exp-test"
    assert records[1].prompt_tokens == 100 and records[1].completion_tokens == 50
    assert server.requests[0]["model"] == "scripted-model"


def test_incorrect_parent_feedback_carries_the_diff(loopback, tiny_tasks, tmp_path):
    server = loopback(lambda req, i: kernel("WRONG") if i == 0 else kernel("FIXED"))
    drive(generator(settings(server.url), tmp_path), [tiny_tasks["1/1"]], fake_verifier(tiny_tasks))
    assert "max |diff| 3.5" in server.user_prompts()[1]


def test_crossover_prompt_holds_both_parents(loopback, tiny_tasks, tmp_path):
    def script(req, i):
        return kernel("FAST", "out[i] = 2 * in[i];") if i == 0 else kernel("SLOW", "out[i] = in[i] + 0;")

    server = loopback(script)
    budget = Budget(rounds=2, samples_per_round=2, concurrency=1)
    records = drive(generator(settings(server.url, budget), tmp_path), [tiny_tasks["1/1"]], fake_verifier(tiny_tasks))
    crossover = [r for r in records if "crossover" in r.kernel_name]
    assert len(crossover) == 1
    prompt = server.user_prompts()[3]
    assert "out[i] = 2 * in[i];" in prompt and "out[i] = in[i] + 0;" in prompt
    round0 = {r.kernel_id for r in records if r.round == 0}
    assert set(crossover[0].parent_ids) == round0 and len(round0) == 2


def test_rounds_and_samples_bound_the_requests(loopback, tiny_tasks, tmp_path):
    server = loopback(lambda req, i: kernel(f"V{i}"))
    budget = Budget(rounds=3, samples_per_round=2, concurrency=2)
    tasks = [tiny_tasks["1/1"], tiny_tasks["1/2"]]
    records = drive(generator(settings(server.url, budget), tmp_path), tasks, fake_verifier(tiny_tasks))
    assert len(server.requests) == 3 * 2 * 2 == len(records)
    assert sorted({r.round for r in records}) == [0, 1, 2]


def test_token_cap_stops_the_loop(loopback, tiny_tasks, tmp_path):
    server = loopback(lambda req, i: kernel(f"V{i}"))  # 150 tokens per response
    budget = Budget(rounds=5, samples_per_round=2, concurrency=1, max_total_tokens=400)
    gen = generator(settings(server.url, budget), tmp_path)
    records = drive(gen, [tiny_tasks["1/1"]], fake_verifier(tiny_tasks))
    assert len(server.requests) == 3 == len(records)  # 150, 300, 450 >= 400: no fourth request
    assert "token budget" in gen.stop_reason
    assert gen.tracker.total_tokens == 450


def test_cost_cap_stops_the_loop(loopback, tiny_tasks, tmp_path):
    server = loopback(lambda req, i: kernel(f"V{i}"))
    budget = Budget(rounds=5, samples_per_round=1, concurrency=1, max_cost_usd=0.0025)
    # 100 prompt tokens at $10/M + 50 completion tokens at $20/M = $0.002 per request
    cfg = settings(server.url, budget, prompt_usd_per_mtok=10.0, completion_usd_per_mtok=20.0)
    gen = generator(cfg, tmp_path)
    records = drive(gen, [tiny_tasks["1/1"]], fake_verifier(tiny_tasks))
    assert len(records) == 2
    assert records[0].cost_usd == pytest.approx(0.002)
    assert "cost budget" in gen.stop_reason


def test_malformed_responses_are_recorded_failed_attempts(loopback, tiny_tasks, tmp_path):
    answers = ["I am sorry, I cannot write that kernel.", "", "```python\nprint('not a kernel')\n```"]
    server = loopback(lambda req, i: answers[i])
    budget = Budget(rounds=1, samples_per_round=3, concurrency=1)
    records = drive(generator(settings(server.url, budget), tmp_path), [tiny_tasks["1/1"]], fake_verifier(tiny_tasks))
    assert len(records) == 3
    assert all(r.status == "compile_error" for r in records)
    assert "I am sorry, I cannot write that kernel." in records[0].cuda_code
    assert all(r.prompt_tokens == 100 for r in records)
    assert len({r.kernel_id for r in records}) == 3


def test_rate_limit_then_success_is_retried(loopback, tiny_tasks, tmp_path):
    def script(req, i):
        if i == 0:
            return 429, {"error": {"message": "slow down", "type": "rate_limit_exceeded"}}
        return kernel("OK")

    server = loopback(script)
    budget = Budget(rounds=1, samples_per_round=1, concurrency=1)
    records = drive(generator(settings(server.url, budget), tmp_path), [tiny_tasks["1/1"]], fake_verifier(tiny_tasks))
    assert len(server.requests) == 2
    assert [r.status for r in records] == ["correct"]


def test_persistent_server_errors_become_a_failed_attempt(loopback, tiny_tasks, tmp_path):
    server = loopback(lambda req, i: (503, {"error": {"message": "overloaded"}}))
    budget = Budget(rounds=1, samples_per_round=1, concurrency=1)
    records = drive(generator(settings(server.url, budget), tmp_path), [tiny_tasks["1/1"]], fake_verifier(tiny_tasks))
    assert len(server.requests) == 3  # the retry attempts
    assert records[0].status == "compile_error" and "request failed" in records[0].cuda_code


def test_api_key_never_leaks(loopback, tiny_tasks, tmp_path, caplog):
    key = "sk-SECRET-do-not-leak-1234"

    def script(req, i):
        if i < 2:  # servers do echo credentials in error messages
            return 500, {"error": {"message": f"internal error for key {key}"}}
        if i < 5:
            return 500, {"error": {"message": f"still failing for {key}"}}
        return kernel("OK")

    server = loopback(script)
    caplog.set_level(logging.DEBUG)
    budget = Budget(rounds=2, samples_per_round=1, concurrency=1)
    llm = generator(settings(server.url, budget, key=key), tmp_path)
    assert llm.secrets() == [key]  # what a build's store is redacted of, besides its own environment's keys
    records = drive(llm, [tiny_tasks["1/1"]], fake_verifier(tiny_tasks))
    assert server.headers[0]["authorization"] == f"Bearer {key}"  # the key was really used
    assert records[0].status == "compile_error"
    dumped = json.dumps([dataclasses.asdict(r) for r in records])
    assert "still failing" in dumped or "internal error" in dumped  # the error text itself is kept
    assert key not in dumped
    assert key not in caplog.text
    assert "[redacted]" in caplog.text or "[redacted]" in dumped


def test_authentication_error_stops_with_a_redacted_message(loopback, tiny_tasks, tmp_path):
    key = "sk-SECRET-auth-9876"
    server = loopback(lambda req, i: (401, {"error": {"message": f"invalid key {key}"}}))
    budget = Budget(rounds=1, samples_per_round=1, concurrency=1)
    with pytest.raises(UsageError) as info:
        drive(
            generator(settings(server.url, budget, key=key), tmp_path), [tiny_tasks["1/1"]], fake_verifier(tiny_tasks)
        )
    assert key not in str(info.value) and "scripted-model" in str(info.value)


def test_several_models_each_named_in_records(loopback, tiny_tasks, tmp_path):
    server = loopback(lambda req, i: kernel(f"{req['model']}-{i}"))
    budget = Budget(rounds=1, samples_per_round=1, concurrency=2)
    cfg = settings(server.url, budget, models=("model-a", "model-b"))
    records = drive(generator(cfg, tmp_path), [tiny_tasks["1/1"]], fake_verifier(tiny_tasks))
    assert sorted(r.model for r in records) == ["model-a", "model-b"]
    assert {r.kernel_name.split("-r0")[0] for r in records} == {"model-a", "model-b"}


def test_archive_examples_of_similar_tasks_reach_later_prompts(loopback, tiny_tasks, tmp_path):
    def script(req, i):
        prompt = req["messages"][-1]["content"]
        if "`relu`" in prompt.split("\n")[0]:
            return kernel("FAST", "out[i] = in[i] > 0 ? in[i] : 0; // relu-kernel-body")
        return kernel("SLOW", "out[i] = in[i]; // leaky-body")

    server = loopback(script)
    budget = Budget(rounds=2, samples_per_round=1, concurrency=1)
    drive(
        generator(settings(server.url, budget), tmp_path),
        [tiny_tasks["1/1"], tiny_tasks["1/2"]],
        fake_verifier(tiny_tasks),
    )
    prompts = server.user_prompts()
    leaky_round1 = [p for p in prompts[2:] if "`leaky_relu`" in p.split("\n")[0]]
    assert leaky_round1 and "relu-kernel-body" in leaky_round1[0]
    assert "relu-kernel-body" not in prompts[1]  # round 0: nothing verified yet


def test_task_without_functional_form_gets_a_checked_one(loopback, tiny_tasks, tmp_path):
    functional = f"Here it is:\n```python\n{FUNCTIONAL_LINEAR_TANH}```\n"
    server = loopback(lambda req, i: functional if i == 0 else kernel("K"))
    checked = []

    def check(task, path, backend):
        checked.append((task.id, path.read_text()))
        return FunctionalCheck(True, None, "process")

    budget = Budget(rounds=1, samples_per_round=1, concurrency=1)
    gen = generator(settings(server.url, budget), tmp_path, functional_check=check)
    task = tiny_tasks["1/3"]
    assert not task.has_functional
    records = drive(gen, [task], fake_verifier({**tiny_tasks, "1/3": task}))
    assert checked and "def module_fn" in checked[0][1]
    assert gen.generated_tasks["1/3"].path.parent.is_relative_to(tmp_path)
    assert gen.functional_attempts[0]["accepted"] is True
    assert len(records) == 1 and records[0].task_id == "1/3"


def test_rejected_functional_form_skips_the_task(loopback, tiny_tasks, tmp_path):
    server = loopback(lambda req, i: "```python\ndef module_fn(x):\n    return x\n\nclass Model: pass\n```")
    gen = generator(
        settings(server.url, Budget(rounds=1, samples_per_round=1, concurrency=1)),
        tmp_path,
        functional_check=lambda task, path, backend: FunctionalCheck(False, "output differs", "process"),
    )
    records = drive(gen, [tiny_tasks["1/3"]], fake_verifier(tiny_tasks))
    assert records == [] and len(server.requests) == 1
    assert any("no accepted functional form" in n for n in gen.notes)
