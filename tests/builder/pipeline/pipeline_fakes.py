"""Trusted stand-ins for the verify engine, used where a test is about the pipeline, not verification.

`FakeVerifier` is passed to the build (`Orchestrator(..., make_verifier=FakeVerifier)`, or `fake_cli.py` for the
command line); this module itself, with `compile_candidate` / `evaluate_compiled`, is the Ray executor's engine
(`ray_engine=pipeline_fakes`). Verdicts follow the bundled manifest's designed verdict, so tests can predict them;
the executors stamp every record made here with the stand-in's name. A delay slows each evaluation down so a
test can kill a build mid-run. Nothing here runs candidate code.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from functools import partial

from schemas import KernelRecord


def fake_record(candidate, task, options):
    status = candidate.designed_verdict or "correct"
    # A stable pseudo-runtime per kernel so preference pairs and speedups are reproducible.
    runtime = 1.0 + int(hashlib.sha256(candidate.source.encode()).hexdigest()[:4], 16) / 65536
    correct = status == "correct"
    return KernelRecord(
        task_id=task.id,
        level=task.level,
        task_number=task.number,
        op_name=task.name,
        op_category=task.op_category,
        backend=getattr(options, "backend", "cpu"),
        suite=task.suite,
        status=status,
        flags=[],
        ranking_eligible=correct,
        error=None if correct else f"fake verdict {status}",
        max_diff=0.0 if correct else 1.0,
        runtime_ms=runtime if correct else None,
        eager_ms=1.5,
        compile_ms=1.2,
        speedup_eager=1.5 / runtime if correct else None,
        speedup_compile=1.2 / runtime if correct else None,
        reference_module_code=task.source,
        reference_functional_code=task.functional_source(),
        seeds=list(getattr(options, "seeds", [])),
        trials=len(getattr(options, "seeds", [])),
        compile_s=0.01,
        eval_s=0.02,
        gpu_name="fake-cpu",
        torch_version="fake",
        **candidate.provenance_fields(),
    )


class FakeVerifier:
    """A verifier factory of its own (`make_verifier(options, settings)`); `slowed(s)` one that waits s per pair."""

    def __init__(self, options, settings=None, delay_s: float = 0.0):
        self.options = options
        self.delay_s = delay_s

    @classmethod
    def slowed(cls, delay_s: float):
        return partial(cls, delay_s=delay_s)

    def stream(self, pairs):
        for candidate, task in pairs:
            time.sleep(self.delay_s)
            yield fake_record(candidate, task, self.options)


@dataclass
class FakeCompiled:
    ok: bool
    library_path: str | None
    pid: int


def compile_candidate(candidate, task, options):
    return FakeCompiled(ok=True, library_path=None, pid=os.getpid())


def evaluate_compiled(compiled, candidate, task, options):
    record = fake_record(candidate, task, options)
    record.error = f"compiled in pid {compiled.pid}, evaluated in pid {os.getpid()}"
    return record


class BrokenEngine:
    """A Ray engine whose evaluations raise: a bug of the builder's, which says nothing about any kernel."""

    compile_candidate = staticmethod(compile_candidate)

    @staticmethod
    def evaluate_compiled(compiled, candidate, task, options):
        raise RuntimeError("the engine broke")


class SlowEngine:
    """A Ray engine whose evaluations take a minute: whenever a test looks, the build is mid-evaluation."""

    compile_candidate = staticmethod(compile_candidate)

    @staticmethod
    def evaluate_compiled(compiled, candidate, task, options):
        time.sleep(60)
        return evaluate_compiled(compiled, candidate, task, options)


class FailingControlEngine:
    """A Ray engine whose control kernel fails wherever it runs (a broken node): nothing may be evaluated."""

    compile_candidate = staticmethod(compile_candidate)
    evaluate_compiled = staticmethod(evaluate_compiled)

    @staticmethod
    def control_check(options):
        from builder.errors import InfrastructureError

        raise InfrastructureError(f"the control kernel came out incorrect (pid {os.getpid()})")


class MachineryFailingVerifier(FakeVerifier):
    """A verifier whose machinery fails: every pair (`failing("always")`), or the first pair's first try only
    (`failing("once")`), comes back as an InfrastructureFailure instead of a record."""

    def __init__(self, options, settings=None, mode: str = "always"):
        super().__init__(options, settings)
        self.mode = mode
        self.tried: set[tuple[str, str]] = set()

    @classmethod
    def failing(cls, mode: str):
        return partial(cls, mode=mode)

    def stream(self, pairs):
        from builder.verify.engine.infrastructure import InfrastructureFailure

        for candidate, task in pairs:
            key = (task.id, candidate.kernel_id)
            if self.mode == "always" or not self.tried:
                self.tried.add(key)
                yield InfrastructureFailure(candidate, task, "the sandbox did not start: bwrap: fake")
            else:
                yield fake_record(candidate, task, self.options)
