"""Trusted stand-ins for the verify engine, used where a test is about the pipeline, not verification.

`FakeVerifier` is passed to the build (`Orchestrator(..., make_verifier=FakeVerifier)`, or `fake_cli.py` for the
command line), on either executor: Ray's node engines import it by name. Verdicts follow the bundled manifest's
designed verdict, so tests can predict them; the executors stamp every record made here with the stand-in's name.
A delay slows each evaluation down so a test can kill a build mid-run. Nothing here runs candidate code.
"""

from __future__ import annotations

import hashlib
import os
import time
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


class PidNotingVerifier(FakeVerifier):
    """A verifier whose records say which process made them (in `error`): a Ray node engine's, not the build's."""

    def stream(self, pairs):
        for record in super().stream(pairs):
            record.error = f"verified in pid {os.getpid()}"
            yield record


class BrokenVerifier(FakeVerifier):
    """A verifier that raises once it has read a pair: a bug of the builder's, which says nothing about any kernel."""

    def stream(self, pairs):
        for _ in pairs:
            raise RuntimeError("the engine broke")
        yield from ()


class DyingVerifier(PidNotingVerifier):
    """A verifier whose process ends at once when it reads the pair named `dies`, as a killed node engine's would."""

    def stream(self, pairs):
        for candidate, task in pairs:
            if candidate.kernel_name == "dies":
                os._exit(1)
            yield from super().stream([(candidate, task)])


class StreamControlVerifier(FakeVerifier):
    """A verifier that offers the real control kernel to lead its stream (`preflight.StreamControl`), as the real
    engine does, and yields the control's outcome after every other pair's, so that the build must hold them.
    `with_control(outcome)`: "correct", "incorrect", "machinery" (an InfrastructureFailure) or "lost" (none at all).
    The pairs each stream was given are kept in `streams` (class-wide, so a test can read them after the build)."""

    streams: list[list[tuple[str, str]]] = []

    def __init__(self, options, settings=None, control_outcome: str = "correct"):
        super().__init__(options, settings)
        self.control_outcome = control_outcome

    @classmethod
    def with_control(cls, outcome: str):
        return partial(cls, control_outcome=outcome)

    def control(self):
        from builder.verify.engine.preflight import StreamControl

        return StreamControl.unless_passed_lately(self.options)

    def stream(self, pairs):
        from builder import config
        from builder.verify.engine.infrastructure import InfrastructureFailure

        pairs = list(pairs)
        StreamControlVerifier.streams.append([(task.id, candidate.kernel_name) for candidate, task in pairs])
        controls = [pair for pair in pairs if pair[0].generator == config.INFRA_CONTROL_GENERATOR]
        for candidate, task in pairs:
            if (candidate, task) not in controls:
                yield fake_record(candidate, task, self.options)
        for candidate, task in controls:
            if self.control_outcome == "machinery":
                yield InfrastructureFailure(candidate, task, "the sandbox did not start: bwrap: fake")
            elif self.control_outcome != "lost":
                record = fake_record(candidate, task, self.options)
                record.status = self.control_outcome
                yield record


class FailingControlVerifier(FakeVerifier):
    """A verifier whose control kernel fails wherever it runs (a broken node): nothing may be evaluated."""

    def preflight(self):
        from builder.errors import InfrastructureError

        raise InfrastructureError(f"the control kernel came out incorrect (pid {os.getpid()})")


BROKEN_NODE_VARIABLE = "KA_TEST_BROKEN_NODE"  # set where a test's Ray node started: that node is broken


class BrokenNodeVerifier(PidNotingVerifier):
    """A verifier whose control kernel fails on the nodes a test marked broken (`BROKEN_NODE_VARIABLE`)."""

    def preflight(self):
        from builder.errors import InfrastructureError

        if os.environ.get(BROKEN_NODE_VARIABLE):
            raise InfrastructureError("the control kernel came out incorrect on this node")


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


class LostEngineVerifier(FakeVerifier):
    """A verifier whose first stream loses every pair it was handed at once, as an engine that ended would (one
    incident), and whose later streams record them."""

    def __init__(self, options, settings=None):
        super().__init__(options, settings)
        self.streams = 0

    def stream(self, pairs):
        from builder.verify.engine.infrastructure import InfrastructureFailure

        self.streams += 1
        if self.streams > 1:
            yield from super().stream(pairs)
            return
        for candidate, task in list(pairs):
            yield InfrastructureFailure(candidate, task, "the engine process ended (exit -9)", "engine 1 ended")
