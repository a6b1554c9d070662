"""How many of a foreign archive's claims survived our re-verification.

A claim of correctness *held* when our verdict is `correct` (our verdict already folds in the
disqualifying checks the original lacked: unwritten outputs, input mutation, ...). A claimed speedup
held when we measured at least `SPEEDUP_CLAIM_SLACK` of it against PyTorch eager on the same task.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable
from typing import Any

SPEEDUP_CLAIM_SLACK = 0.8  # measured/claimed ratio above which a speedup claim counts as held (timing noise, other GPU)


def _get(record: Any, name: str) -> Any:
    return record.get(name) if isinstance(record, dict) else getattr(record, name, None)


def claims_summary(records: Iterable[Any]) -> dict[str, Any]:
    """Counts of claims made by imported kernels and how many held (records: KernelRecords or dicts)."""
    with_claims = [
        r for r in records if _get(r, "claimed_correct") is not None or _get(r, "claimed_speedup") is not None
    ]
    claimed_correct = [r for r in with_claims if _get(r, "claimed_correct") is True]
    claimed_incorrect = [r for r in with_claims if _get(r, "claimed_correct") is False]
    held = [r for r in claimed_correct if _get(r, "status") == "correct"]
    refuted = [r for r in claimed_correct if _get(r, "status") != "correct"]
    speed_pairs = [
        (float(_get(r, "claimed_speedup")), float(_get(r, "speedup_eager")))
        for r in claimed_correct
        if _get(r, "claimed_speedup") is not None
        and _get(r, "speedup_eager") is not None
        and _get(r, "status") == "correct"
    ]
    speed_held = sum(1 for claimed, measured in speed_pairs if measured >= SPEEDUP_CLAIM_SLACK * claimed)
    return {
        "records": len(with_claims),
        "claimed_correct": len(claimed_correct),
        "held": len(held),
        "refuted": len(refuted),
        "held_fraction": (len(held) / len(claimed_correct)) if claimed_correct else None,
        "refuted_by_status": dict(Counter(_get(r, "status") for r in refuted)),
        "refuted_by_flag": dict(Counter(flag for r in refuted for flag in (_get(r, "flags") or []))),
        "claimed_incorrect": len(claimed_incorrect),
        "claimed_incorrect_but_correct": sum(1 for r in claimed_incorrect if _get(r, "status") == "correct"),
        "speedup_compared": len(speed_pairs),
        "speedup_held": speed_held,
        "claimed_speedup_median": statistics.median(c for c, _ in speed_pairs) if speed_pairs else None,
        "measured_speedup_median": statistics.median(m for _, m in speed_pairs) if speed_pairs else None,
    }
