"""A start's milestones (`milestones.py`): the first time each was reached, on the machine's monotonic clock."""

from __future__ import annotations

import time

from builder.verify import milestones


def test_a_milestone_keeps_the_first_time_it_was_reached_until_cleared():
    milestones.clear()
    before = time.monotonic()
    milestones.mark("zygote_ready")
    first = milestones.marks()["zygote_ready"]
    time.sleep(0.01)
    milestones.mark("zygote_ready")  # a second zygote (a later stream's) is no milestone of this start
    milestones.mark("first_record")
    marks = milestones.marks()
    assert before <= first == marks["zygote_ready"] < marks["first_record"] <= time.monotonic()
    marks["first_record"] = 0.0  # a copy: the caller cannot change what was reached
    assert milestones.marks()["first_record"] > 0.0
    milestones.clear()
    assert milestones.marks() == {}
