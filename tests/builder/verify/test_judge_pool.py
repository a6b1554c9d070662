"""judge_pool: the comparisons run in a judge process of their own, find what the in-thread judge finds, and a
broken pool gives way to judging in the calling thread."""

from __future__ import annotations

import multiprocessing
import os

import torch

from builder.verify import judge, judge_pool, tensor_files


def write(directory, **outputs):
    tensor_files.write_dir(directory, outputs)
    return tensor_files.OutputsDir(directory, 1 << 30)


def pid_of_the_judge() -> int:
    return os.getpid()


def dies_in_a_judge_process() -> str:
    if multiprocessing.parent_process() is not None:
        os._exit(3)  # a judge process that dies mid-judgement
    return "judged here"


def test_comparisons_run_in_another_process_and_find_what_the_thread_finds(tmp_path):
    assert judge_pool.run(pid_of_the_judge) != os.getpid()
    reference = write(tmp_path / "reference", trial0=torch.ones(8), trial1=torch.ones(8), probe=torch.ones(2),
                      perturbed0=torch.full((8,), 2.0))  # fmt: skip
    candidate = write(tmp_path / "candidate", trial0=torch.ones(8), trial1=torch.zeros(8), probe=torch.ones(2),
                      perturbed0=torch.ones(8))  # fmt: skip
    manifest = {"trials": 2, "probe_bit_exact": True, "responsive_targets": [[0, "input", 0]]}
    here = judge.find_checks(candidate, reference, manifest, 1e-4, 1e-4)
    there = judge_pool.run(judge_pool.find_checks, judge_pool.source_of(candidate), judge_pool.source_of(reference),
                           manifest, 1e-4, 1e-4)  # fmt: skip
    assert there == here
    assert there.errors and there.errors[0].startswith("trial 2:") and "ignores_input" in there.flags
    verdict = judge.apply_findings({"status": "correct", "flags": ["uses_torch_ops"]}, there)
    assert verdict["status"] == "incorrect" and verdict["flags"] == ["ignores_input", "uses_torch_ops"]


def test_a_broken_pool_gives_way_to_judging_in_the_calling_thread():
    assert judge_pool.run(dies_in_a_judge_process) == "judged here"
    assert judge_pool.run(pid_of_the_judge) != os.getpid()  # a new pool for the next judgement
