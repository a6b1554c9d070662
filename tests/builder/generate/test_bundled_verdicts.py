"""Bundled candidates get the verdicts they were designed for, through the real verifier.

GPU: every bundled CUDA candidate. CPU: the C++ CPU-contract corpus (slow: one C++ extension build per
candidate). A mismatch is investigated, never fixed by relabelling the manifest: a label changes only when the
investigation shows the design was wrong, with the measurement written beside it (1/26 hardware_approx).
"""

from __future__ import annotations

import pytest

from builder.generate.bundled import BundledGenerator
from builder.tasks import load_suite

from .helpers import verify_engine


def mismatches(backend: str) -> list[str]:
    engine = verify_engine()
    suite = load_suite()
    tasks = {t.id: t for t in suite.tasks}
    candidates = BundledGenerator(backend=backend).candidates(suite.tasks)
    assert candidates, f"no bundled {backend} candidates"
    by_id = {c.kernel_id: c for c in candidates}
    verifier = engine.Verifier(engine.VerifyOptions(backend=backend))
    problems = []
    for record in verifier.stream((c, tasks[c.task_id]) for c in candidates):
        candidate = by_id[record.kernel_id]
        missing_flags = set(candidate.designed_flags) - set(record.flags)
        if record.status != candidate.designed_verdict or missing_flags:
            problems.append(
                f"{candidate.source_ref}: designed {candidate.designed_verdict} {sorted(candidate.designed_flags)}, "
                f"got {record.status} {sorted(record.flags)} ({(record.error or '')[:200]})"
            )
    return problems


@pytest.mark.gpu
def test_bundled_cuda_candidates_get_their_designed_verdicts():
    problems = mismatches("cuda")
    assert not problems, "\n".join(problems)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_bundled_cpu_candidates_get_their_designed_verdicts():
    problems = mismatches("cpu")
    assert not problems, "\n".join(problems)
