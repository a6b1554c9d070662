"""A record's flag_notes: why each of its flags was raised, the parent's own finding first, then the child's claim
(kept only for a flag the record has, and bounded)."""

from __future__ import annotations

import json

from builder import config
from builder.verify.judge import verdict
from schemas import validate

BASE = dict(kernel_id="0" * 20, task_id="1/1", level=1, task_number=1, op_name="scale_shift", kernel_name="k",
            backend="cpu", language="cpp", generator="manual", cuda_code="// code")  # fmt: skip


def test_the_parents_finding_and_the_childs_claim_both_reach_the_record():
    result = {"status": "correct", "flags": ["uses_torch_ops", "degenerate_task"],
              "flag_notes": {"uses_torch_ops": "87% of the call's time in PyTorch/library kernels",
                             "degenerate_task": "near-constant output", "input_mutation": "not a flag it has"}}  # fmt: skip
    static = {"uses_torch_ops": "extension imports at::cpu::mm(at::Tensor const&, at::Tensor const&)"}
    record = verdict.assemble_record(BASE, status="correct", result=result, static_notes=static)
    notes = json.loads(record.flag_notes)
    assert record.flags == ["degenerate_task", "uses_torch_ops"] and not record.ranking_eligible
    assert notes["uses_torch_ops"] == f"{static['uses_torch_ops']}; 87% of the call's time in PyTorch/library kernels"
    assert notes["degenerate_task"] == "near-constant output" and "input_mutation" not in notes
    assert validate(record) == []


def test_a_flag_the_parent_found_alone_is_a_flag_with_its_note():
    static = {"uses_torch_ops": "extension imports at::cpu::mm(at::Tensor const&, at::Tensor const&)"}
    record = verdict.assemble_record(BASE, status="correct", result={"status": "correct", "flags": []},
                                     static_notes=static)  # fmt: skip
    assert record.flags == ["uses_torch_ops"] and json.loads(record.flag_notes) == static


def test_a_childs_note_is_bounded_and_no_flags_means_no_notes():
    result = {"status": "correct", "flags": ["degenerate_task"], "flag_notes": {"degenerate_task": "x" * 100_000}}
    record = verdict.assemble_record(BASE, status="correct", result=result)
    assert len(json.loads(record.flag_notes)["degenerate_task"].encode()) <= config.FLAG_NOTE_CHARS
    assert verdict.assemble_record(BASE, status="correct", result={"status": "correct"}).flag_notes is None
