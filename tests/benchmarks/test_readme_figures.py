"""The README's figures come from the sample and the run reports (benchmarks/readme_figures.py): the real README
matches them, and a tiny report renders as written here."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks import readme_figures

THROUGHPUT = {
    "kind": "throughput",
    "title": "one GPU, builds cached",
    "transcribed": "by hand, for this test",
    "date": "2026-01-02",
    "commit": "abc1234",
    "gpu": "NVIDIA H100",
    "command": "bash benchmarks/device/throughput.sh",
    "figures": {"mix": "a tiny mix", "evaluations": 12, "kernels_per_hour": 3456, "after_first_record_per_hour": 4000},
}
SCALING = {
    "kind": "scaling",
    "title": "two GPUs against one",
    "date": "2026-01-03",
    "commit": "def5678",
    "gpu": "2x NVIDIA H200",
    "command": "bash benchmarks/device/throughput.sh",
    "figures": {
        "mix": "the same mix",
        "runs": [
            {"one_gpu_per_hour": 1000, "two_gpus_per_hour": 1800, "ratio": 1.8},
            {"one_gpu_per_hour": 1100, "two_gpus_per_hour": 2090, "ratio": 1.9},
        ],
    },
}


def write_reports(folder, **reports):
    folder.mkdir()
    for name, report in reports.items():
        (folder / f"{name}.json").write_text(json.dumps(report))
    return folder


def test_the_readme_s_figures_are_those_of_the_sample_and_the_reports(capsys):
    assert readme_figures.main(["--check"]) == 0, capsys.readouterr().err


def test_a_tiny_report_renders_by_kind_and_rewrites_only_the_block(tmp_path):
    reports = write_reports(tmp_path / "reports", a_scaling=SCALING, b_throughput=THROUGHPUT)
    block = readme_figures.render(reports, None, tmp_path / "unused.json")
    assert block.splitlines() == [
        "- **Throughput, one GPU, builds cached**: 3,456 verified kernels/hour over 12 evaluations, 4,000/h after "
        "the first evaluated record (a tiny mix). NVIDIA H100, commit `abc1234`, 2026-01-02 "
        "(`benchmarks/reports/b_throughput.json`).",
        "- **Scaling, two GPUs against one**: 1.80x, 1.90x the one-GPU rate over the run in 2 runs (1,800-2,090 "
        "against 1,000-1,100 kernels/hour; the same mix). 2x NVIDIA H200, commit `def5678`, 2026-01-03 "
        "(`benchmarks/reports/a_scaling.json`).",
    ]
    readme = tmp_path / "README.md"
    readme.write_text(f"# Title\n\nbefore\n\n{readme_figures.BEGIN}\nstale\n{readme_figures.END}\n\nafter\n")
    argv = ["--readme", str(readme), "--reports", str(reports), "--sample", str(tmp_path / "sample")]
    sample = tmp_path / "sample" / "data"
    sample.mkdir(parents=True)
    rows = {
        "task_id": ["1/1", "1/1", "2/3"],
        "status": ["correct", "incorrect", "correct"],
        "builder_version": ["0.1.0+g97269e9ebb73", "0.1.0+g97269e9ebb73", "0+unknown"],
        "gpu_name": ["NVIDIA H200", "NVIDIA H200", "NVIDIA H200"],
    }
    pq.write_table(pa.table(rows), sample / "level_1-00000-of-00001.parquet")
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"properties": {name: {} for name in [*rows, "floor_ms"]}}))
    argv += ["--schema", str(schema)]

    assert readme_figures.main([*argv, "--check"]) == 1
    assert readme_figures.main(argv) == 0
    assert readme_figures.main([*argv, "--check"]) == 0
    text = readme.read_text()
    assert text.startswith("# Title\n\nbefore\n\n") and text.endswith(f"{readme_figures.END}\n\nafter\n")
    assert "stale" not in text
    assert (
        "- **The sample** (`sample/`): 3 kernels over 2 tasks, 2 correct, verified on NVIDIA H200 by builder "
        "commits 97269e9 (2 records) and 0+unknown (1 record). Record fields of the current schema it lacks: "
        "`floor_ms`.\n- **Throughput, one GPU, builds cached**" in text
    )


def test_a_report_of_an_unknown_kind_or_a_readme_without_markers_is_an_error(tmp_path, capsys):
    reports = write_reports(tmp_path / "reports", odd={**THROUGHPUT, "kind": "latency"})
    readme = tmp_path / "README.md"
    readme.write_text(f"{readme_figures.BEGIN}\n{readme_figures.END}\n")
    argv = ["--readme", str(readme), "--reports", str(reports), "--sample", str(tmp_path / "none")]
    assert readme_figures.main(argv) == 2
    assert "no Parquet" in capsys.readouterr().err
    (tmp_path / "none" / "data").mkdir(parents=True)
    pq.write_table(
        pa.table({name: ["x"] for name in readme_figures.SAMPLE_COLUMNS}), tmp_path / "none" / "data" / "l.parquet"
    )
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"properties": {}}))
    assert readme_figures.main([*argv, "--schema", str(schema)]) == 2
    assert "unknown kind 'latency'" in capsys.readouterr().err
    readme.write_text("no markers\n")
    (reports / "odd.json").unlink()
    assert readme_figures.main([*argv, "--schema", str(schema)]) == 2
    assert "no <!-- figures:begin -->" in capsys.readouterr().err


def test_a_kernelbench_report_gives_the_ratio_of_its_two_rates(tmp_path):
    report = {"kind": "kernelbench", "title": "one GPU, from a cold start", "date": "2026-01-04", "commit": "abc1234",
              "gpu": "NVIDIA H200", "figures": {"engine_per_hour": 3000, "engine_kernels": 96, "kernelbench_per_hour": 200,
                                                "kernelbench_kernels": 16, "verdicts_agree": 14, "mix": "the same mix"}}  # fmt: skip
    block = readme_figures.render(write_reports(tmp_path / "reports", kb=report), None, tmp_path / "unused.json")
    assert block == (
        "- **Against KernelBench's own flow, one GPU, from a cold start**: 15.0x (3,000 verified kernels/hour from "
        "the start over 96 kernels, KernelBench's flow 200/h over the first 16 of them); verdicts 14 of 16 the same "
        "(the same mix). NVIDIA H200, commit `abc1234`, 2026-01-04 (`benchmarks/reports/kb.json`)."
    )
