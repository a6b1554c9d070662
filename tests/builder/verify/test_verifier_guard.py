"""The verifier's own code in the candidate's process (tamper.VerifierGuard), the flags the checks wrote beside
their outputs (evaluation.weigh_claims), and eager slowed in the candidate's process (slowed_baseline)."""

from __future__ import annotations

import json
import time

import torch

from builder.verify.child import tamper
from builder.verify.engine.baseline_cache import eager_slowed_reason
from builder.verify.engine.clean_reference import CleanReference
from builder.verify.engine.evaluation import weigh_claims
from builder.verify.protocol import tensor_files


def test_the_guard_names_a_rebound_clock_and_writes_it_where_the_parent_looks(tmp_path, monkeypatch):
    path = tmp_path / "tampered"
    guard = tamper.VerifierGuard({"tampered_path": str(path)})
    assert guard.check("at first") is None and not path.exists()
    real = time.perf_counter
    monkeypatch.setattr(time, "perf_counter", lambda: real() / 20)
    assert "time.perf_counter" in guard.check("after the candidate loaded")
    assert "after the candidate loaded: time.perf_counter" in path.read_text()


def test_the_guard_names_a_rebound_check_function_and_a_result_writer(monkeypatch):
    from builder.verify.child import checks
    from builder.verify.child import words as child_words

    guard = tamper.VerifierGuard({})
    monkeypatch.setattr(checks, "changed_positions", lambda current, pristine: [])
    monkeypatch.setattr(child_words, "write_result", lambda path, result: None)
    found = guard.check("between two steps")
    assert (
        "builder.verify.child.checks.changed_positions" in found and "builder.verify.child.words.write_result" in found
    )


def test_the_guard_stays_silent_while_the_verifier_runs_as_designed():
    """Imports the checks make lazily, timers made and used: nothing of the verifier is rebound by its own work."""
    from builder.tasks import load_task_module
    from builder.tasks.suite import describe_task_file
    from builder.verify.child.checks import FunctionalBinding
    from tests.builder.verify.refereed import time_candidate
    from tests.builder.verify.test_timing import JOB, TASK, honest

    guard = tamper.VerifierGuard({})
    task = load_task_module(describe_task_file(TASK))
    time_candidate(FunctionalBinding(honest), task, JOB, "cpu")
    assert guard.check("after a window") is None


def _outputs_with_claims(directory, claims: dict) -> None:
    data = json.dumps(claims).encode()
    tensor_files.write_dir(directory, {"claims": torch.frombuffer(bytearray(data), dtype=torch.uint8)})


def test_flags_the_result_file_left_out_come_back_from_the_checks_outputs(tmp_path):
    _outputs_with_claims(tmp_path / "outputs", {"flags": ["input_mutation"], "notes": {"input_mutation": "input 0"},
                                                "own_kernel_fraction": 0.9})  # fmt: skip
    job = {"outputs_dir": str(tmp_path / "outputs"), "tampered_path": str(tmp_path / "tampered")}
    reference = CleanReference(manifest={"output_bytes": [1024]})
    doctored = {"status": "correct", "flags": [], "flag_notes": {}, "own_kernel_fraction": 0.9}
    weighed = weigh_claims(doctored, job, reference)
    assert {"input_mutation", "tampers_verifier"} <= set(weighed["flags"])
    assert "left out flags the checks found: input_mutation" in weighed["flag_notes"]["tampers_verifier"]
    faithful = {"status": "correct", "flags": ["input_mutation"], "flag_notes": {}, "own_kernel_fraction": 0.9}
    assert weigh_claims(faithful, job, reference)["flags"] == ["input_mutation"]


def test_the_guards_file_disqualifies_whatever_the_result_says(tmp_path):
    _outputs_with_claims(tmp_path / "outputs", {"flags": [], "notes": {}, "own_kernel_fraction": None})
    (tmp_path / "tampered").write_text("after the checks: time.perf_counter")
    job = {"outputs_dir": str(tmp_path / "outputs"), "tampered_path": str(tmp_path / "tampered")}
    weighed = weigh_claims({"status": "correct", "flags": []}, job, CleanReference(manifest={"output_bytes": [8]}))
    assert weighed["flags"] == ["tampers_verifier"] and "time.perf_counter" in weighed["flag_notes"]["tampers_verifier"]


def test_eager_slowed_in_the_candidates_process_is_told_from_load():
    clean = {"eager_ms": 0.3, "eager_runtime": {"min_ms": 0.29, "median_ms": 0.3}}
    slowed = {"eager_window": {"min_ms": 35.0, "median_ms": 35.4}}
    reason = eager_slowed_reason(slowed, clean, "cpu")
    assert "35.4 ms a call (fastest 35 ms) in the candidate's process and 0.3 ms (fastest 0.29 ms)" in reason
    assert eager_slowed_reason(slowed, clean, "cuda")
    fastest_alone = {"eager_window": {"min_ms": 0.31, "median_ms": 7.3}}  # load from elsewhere: slow calls, not all
    assert eager_slowed_reason(fastest_alone, clean, "cpu") is None
    loaded_clean = {"eager_ms": 15.9, "eager_runtime": {"min_ms": 0.14, "median_ms": 15.9}}
    loaded_window = {"eager_window": {"min_ms": 11.9, "median_ms": 15.5}}  # a loaded machine: the clean one slow too
    assert eager_slowed_reason(loaded_window, loaded_clean, "cpu") is None
    assert eager_slowed_reason({"eager_window": {"min_ms": 0.4, "median_ms": 0.42}}, clean, "cuda") is None
    assert eager_slowed_reason(slowed, None, "cuda") is None
