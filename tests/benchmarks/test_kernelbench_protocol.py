"""KernelBench's correctness protocol on the KernelBench-layout generation fixture (CPU sizes): a ModelNew built
as its Model is passes, one whose parameters are made in another order does not (the archive gives it the
reference's values and calls it correct: the difference the GPU run records)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.kernelbench_protocol import main

FOLDER = Path(__file__).resolve().parents[1] / "fixtures" / "kernelbench_generation"


def test_the_protocol_judges_each_file_and_shows_the_archives_verdict_beside_it(tmp_path, capsys):
    report = tmp_path / "reverify"
    report.mkdir()
    records = [{"kernel_name": "level_2_problem_1_sample_1_kernel", "status": "correct", "reference_state_loaded": 2}]
    (report / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "protocol.json"
    args = [str(FOLDER), "--device", "cpu", "--trials", "2", "--only", "^(1/46|2/1)$", "--json", str(out)]
    assert main([*args, "--reverify", str(report)]) == 0
    rows = {row["file"]: row for row in json.loads(out.read_text())}
    assert rows["level_1_problem_46_sample_0_kernel.py"]["verdict"] == "correct"
    assert rows["level_2_problem_1_sample_0_kernel.py"]["verdict"] == "correct"
    reordered = rows["level_2_problem_1_sample_1_kernel.py"]
    assert reordered["verdict"] == "incorrect" and reordered["archive"] == "correct (state loaded: 2)"
    assert rows["level_1_problem_46_sample_0_kernel.py"]["archive"] == "not verified"


def test_a_missing_folder_is_one_line_and_exit_2(tmp_path, capsys):
    assert main([str(tmp_path / "absent")]) == 2
    assert capsys.readouterr().err.strip().startswith("error: no such folder")
