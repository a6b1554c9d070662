"""The judge's file handling and comparisons (trusted parent side), on files written here."""

from __future__ import annotations

import os
import threading

import pytest
import torch

from builder.verify.judge import outputs as judge
from builder.verify.protocol import tensor_files


def write(directory, **named):
    tensor_files.write_dir(directory, named)
    return tensor_files.OutputsDir(directory, 1 << 20)


def test_outputs_round_trip_with_devices_and_descriptions(tmp_path):
    outputs = write(tmp_path / "out", trial0=(torch.ones(3), torch.zeros(2)), probe="a RuntimeError")
    values = outputs.get("trial0")
    assert [v.device for v in values] == ["cpu", "cpu"] and torch.equal(values[0].tensor, torch.ones(3))
    assert outputs.get("probe") == "a RuntimeError" and outputs.get("timing0") is None


def test_a_link_to_another_file_is_never_read_as_the_candidates_output(tmp_path):
    reference = write(tmp_path / "reference", trial0=torch.arange(4.0))
    candidate = write(tmp_path / "candidate", trial0=torch.zeros(4))
    os.remove(tmp_path / "candidate" / "trial0.safetensors")
    os.symlink(tmp_path / "reference" / "trial0.safetensors", tmp_path / "candidate" / "trial0.safetensors")
    candidate = tensor_files.OutputsDir(tmp_path / "candidate", 1 << 20)
    assert "not a plain file" in candidate.get("trial0")
    os.remove(tmp_path / "candidate" / "trial0.safetensors")
    os.link(tmp_path / "reference" / "trial0.safetensors", tmp_path / "candidate" / "trial0.safetensors")
    candidate = tensor_files.OutputsDir(tmp_path / "candidate", 1 << 20)
    manifest = {"trials": 1}
    result = judge.judge_checks({"status": "correct", "flags": []}, candidate, reference, manifest, 1e-4, 1e-4)
    assert result["status"] == "incorrect" and "not a plain file" in result["error"]


def test_an_oversized_file_and_a_malformed_index_are_refused(tmp_path):
    big = write(tmp_path / "big", trial0=torch.zeros(1 << 16))
    assert "exceeds" in tensor_files.OutputsDir(tmp_path / "big", 1024).get("trial0")
    assert big.get("trial0")[0].tensor.numel() == 1 << 16
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "index.json").write_text('["../../etc/passwd"]')
    with pytest.raises(tensor_files.OutputFileError, match="bad outputs index"):
        tensor_files.OutputsDir(tmp_path / "bad", 1024)


def test_a_child_claiming_correct_is_judged_by_its_outputs(tmp_path):
    reference = write(
        tmp_path / "reference", trial0=torch.arange(4.0), trial1=torch.arange(4.0) + 1, probe=torch.ones(2)
    )
    candidate = write(tmp_path / "candidate", trial0=torch.arange(4.0), trial1=torch.arange(4.0), probe=torch.ones(2))
    manifest = {"trials": 2, "probe_bit_exact": True}
    claim = {"status": "correct", "flags": [], "max_diff": 0.0}
    result = judge.judge_checks(claim, candidate, reference, manifest, 1e-4, 1e-4)
    assert result["status"] == "incorrect" and result["error"].startswith("trial 2:") and result["max_diff"] == 1.0


def test_a_probe_that_differs_from_the_clean_one_is_tampering(tmp_path):
    reference = write(tmp_path / "reference", trial0=torch.ones(4), probe=torch.ones(4))
    candidate = write(tmp_path / "candidate", trial0=torch.ones(4), probe=torch.ones(4) + 1e-7)
    exact = judge.judge_checks({"status": "correct"}, candidate, reference, {"trials": 1, "probe_bit_exact": True},
                               1e-4, 1e-4)  # fmt: skip
    assert exact["status"] == "incorrect" and exact["flags"] == ["tampers_reference"]
    # Where the clean process's own two runs differed, the probe is held to the tolerance only.
    loose = judge.judge_checks({"status": "correct"}, candidate, reference, {"trials": 1, "probe_bit_exact": False},
                               1e-4, 1e-4)  # fmt: skip
    assert loose["status"] == "correct" and loose["flags"] == []


def test_an_evicted_reference_keeps_its_files_while_an_evaluation_holds_it(tmp_path, monkeypatch):
    import gc

    from builder.tasks import load_suite
    from builder.verify.engine import clean_reference
    from builder.verify.options import VerifyOptions

    def fake_compute(task, options, directory, cancel=None):  # the reference child's files, without running one
        return clean_reference.CleanReference(outputs=write(directory, trial0=torch.ones(2)), manifest={"trials": 1})

    monkeypatch.setattr(clean_reference, "compute_clean_reference", fake_compute)
    cache = clean_reference.ReferenceCache(capacity=1)
    suite = load_suite()
    options = VerifyOptions(backend="cpu", seeds=[1])
    held = cache.get(suite.get("1/1"), options)
    cache.get(suite.get("1/2"), options)  # evicts 1/1 from the cache...
    gc.collect()
    assert held.outputs.get("trial0")[0].tensor.sum() == 2  # ...but its files stay while it is held
    directory = held.outputs.directory
    del held
    gc.collect()
    assert not directory.exists()


def test_a_child_that_claims_correct_but_leaves_out_its_outputs_is_incorrect(tmp_path):
    reference = write(tmp_path / "reference", trial0=torch.ones(4), trial1=torch.ones(4), probe=torch.ones(2))
    candidate = write(tmp_path / "candidate", trial0=torch.ones(4), probe=torch.ones(2))  # no trial 2
    claim = {"status": "correct", "flags": [], "trials": 5}
    result = judge.judge_checks(claim, candidate, reference, {"trials": 2, "probe_bit_exact": True}, 1e-4, 1e-4)
    assert result["status"] == "incorrect" and "trial 2: the candidate's output is missing" in result["error"]
    assert result["trials"] == 1  # what was judged, not what the child claimed
    raised = judge.judge_checks(dict(claim, status="runtime_error", error="boom"), candidate, reference,
                                {"trials": 2}, 1e-4, 1e-4)  # fmt: skip
    assert raised["status"] == "runtime_error" and raised["error"] == "boom"


def test_a_childs_incorrect_claim_keeps_its_reason_when_the_comparisons_find_none(tmp_path):
    reference = write(tmp_path / "reference", trial0=torch.ones(4), probe=torch.ones(2))
    candidate = write(tmp_path / "candidate", trial0=torch.ones(4), probe=torch.ones(2))
    stale = {"status": "incorrect", "flags": [], "error": "timed call 7 (input set 2): reused across calls?"}
    result = judge.judge_checks(stale, candidate, reference, {"trials": 1, "probe_bit_exact": True}, 1e-4, 1e-4)
    assert result["status"] == "incorrect" and result["error"] == stale["error"]
    wrong = write(tmp_path / "wrong", trial0=torch.zeros(4), probe=torch.ones(2))
    result = judge.judge_checks(stale, wrong, reference, {"trials": 1, "probe_bit_exact": True}, 1e-4, 1e-4)
    assert result["error"].startswith("trial 1:")  # the parent's own finding comes first


def test_the_comparisons_side_by_side_find_what_a_single_pass_finds(tmp_path, monkeypatch):
    """Trials 2 and 3 fail (3 with the poison), trial 5 is missing, the first perturbation moved the output and the
    second did not where the reference moved, and the probe differs: the same findings, in the same order, on one
    thread and on four."""
    base = torch.arange(64.0)
    reference = write(tmp_path / "reference", **{f"trial{i}": base + i for i in range(5)},
                      perturbed0=base * 2, perturbed1=base * 3, probe=base)  # fmt: skip
    poisoned = base + 2
    poisoned.view(torch.int32)[:4] = -1
    candidate = write(tmp_path / "candidate", trial0=base, trial1=base + 5, trial2=poisoned, trial3=base + 3,
                      perturbed0=base * 2, perturbed1=base, probe=base + 1)  # fmt: skip
    manifest = {"trials": 5, "probe_bit_exact": True, "responsive_targets": [[0, "input", "x"], [1, "input", "w"]]}
    found = {}
    for threads in (1, 4):
        monkeypatch.setattr(judge.config, "JUDGE_THREADS", threads)
        found[threads] = judge.find_checks(candidate, reference, manifest, 1e-4, 1e-4)
    assert found[1] == found[4]
    assert found[4].errors[0].startswith("trial 2:") and found[4].missing_trial == 4 and found[4].judged_trials == 4
    assert "input w" in found[4].flags["ignores_input"] and "uninitialized_output" in found[4].flags
    assert "tampers_reference" in found[4].flags and found[4].max_diff == 4.0


def test_side_by_side_runs_the_calls_at_once_and_raises_the_first_a_single_pass_would(monkeypatch):
    monkeypatch.setattr(judge.config, "JUDGE_THREADS", 4)
    both = threading.Barrier(2, timeout=10)  # passes only if two calls wait on it at the same time
    assert judge.side_by_side([both.wait, both.wait, lambda: "third"])[2] == "third"

    def fails(why):
        def call():
            raise ValueError(why)

        return call

    with pytest.raises(ValueError, match="first"):
        judge.side_by_side([lambda: None, fails("first"), fails("second")])


def test_timed_sets_judged_side_by_side_name_the_first_that_fails(tmp_path, monkeypatch):
    base = torch.arange(64.0)
    reference = write(tmp_path / "reference", timing0=base, timing1=base + 1, timing2=base + 2)
    candidate = write(tmp_path / "candidate", timing0=base, timing1=base, timing2=base)
    for threads in (1, 4):
        monkeypatch.setattr(judge.config, "JUDGE_THREADS", threads)
        assert judge.judge_timing(candidate, reference, 3, 1e-4, 1e-4).startswith("timed input set 2:")
        assert judge.judge_timing(candidate, reference, 1, 1e-4, 1e-4) is None
