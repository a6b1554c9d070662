"""The re-verification report from old and new records (no verification run), and the command with the fake
verifier: exit codes, report files, an export of ours re-verified with its verdicts agreeing."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from pipeline_helpers import cli_env, run_cli, run_fake_cli

from builder import config
from builder.errors import UsageError
from builder.pipeline.reverify import NOT_CORRECT, build_report, held, old_verdict, render_markdown, same_method
from builder.pipeline.reverify_run import compile_pattern, default_out


def new(kernel: str, status: str, speedup: float | None = None, flags=(), **fields) -> dict:
    return {"task_id": "1/1", "kernel_id": kernel, "kernel_name": f"k_{kernel}", "status": status,
            "speedup_eager": speedup, "flags": list(flags), **fields}  # fmt: skip


def stored(status: str, speedup: float | None = None, flags=()) -> dict:
    return {"status": status, "speedup_eager": speedup, "flags": list(flags)}


def test_report_from_stored_records():
    records = [
        new("a", "correct", 2.0),
        new("b", "correct", 1.5),  # 2.0 -> 1.5: moved by speed
        new("c", "incorrect", flags=["uninitialized_output"], error="max diff 3.0\nmore"),  # was correct
        new("d", "compile_error", error="nvcc failed | exit 1"),
        new("e", "correct", 1.0, flags=["degenerate_task"]),
    ]
    recorded = {
        ("1/1", "a"): stored("correct", 2.04),
        ("1/1", "b"): stored("correct", 2.0),
        ("1/1", "c"): stored("correct", 1.2),
        ("1/1", "d"): stored("compile_error"),
        ("1/1", "e"): stored("correct", 1.0, flags=["uses_torch_ops"]),
    }
    report = build_report(records, recorded, {"dataset": "ds", "backend": "cpu"})
    verdicts, flags, speedup = report["verdicts"], report["flags"], report["speedup"]
    assert report["dataset"] == "ds" and report["kernels"] == 5
    assert verdicts["confusion"] == {"correct": {"correct": 3, "incorrect": 1}, "compile_error": {"compile_error": 1}}
    assert (verdicts["compared"], verdicts["agree"], verdicts["agreement"]) == (5, 4, 0.8)
    assert flags == {
        "compared": 5,
        "changed": 2,
        "added": {"uninitialized_output": 1, "degenerate_task": 1},
        "removed": {"uses_torch_ops": 1},
    }
    assert (speedup["compared"], speedup["within_tolerance"], speedup["share_within"]) == (3, 2, 2 / 3)
    assert speedup["ratio_quantiles"]["p00"] == 0.75 and speedup["ratio_quantiles"]["p100"] == 1.0
    assert [(m["kernel_id"], m["why"]) for m in report["moved"]] == [("c", "verdict"), ("b", "speedup")]
    assert report["moved"][0]["error"] == "max diff 3.0" and report["moved"][0]["flags_added"] == [
        "uninitialized_output"
    ]
    assert report["held"] is False and report["verdict"].startswith("did not hold: 80.0% of verdicts agree")
    json.dumps(report)  # JSON-ready as it is


def test_claims_only_archive_compares_correct_or_not():
    records = [
        new("a", "compile_error", claimed_correct=False),  # claimed not correct: agrees with any failure
        new("b", "correct", 3.0, claimed_correct=True, claimed_speedup=3.0),
        new("c", "incorrect", claimed_correct=True),
        new("d", "correct"),  # no claim: not compared
    ]
    report = build_report(records, {})
    assert old_verdict(records[0], None).status == NOT_CORRECT and old_verdict(records[0], None).flags is None
    assert report["verdicts"]["confusion"] == {
        "correct": {"correct": 1, "incorrect": 1},
        NOT_CORRECT: {"compile_error": 1},
        "unknown": {"correct": 1},
    }
    assert (report["verdicts"]["compared"], report["verdicts"]["agree"]) == (3, 2)
    assert report["flags"]["compared"] == 0 and report["speedup"]["share_within"] == 1.0


@pytest.mark.parametrize(
    "agree, within, expected",
    [(19, 19, True), (18, 19, False), (20, 18, False), (20, None, True)],
)
def test_held_thresholds(agree, within, expected):
    assert config.REVERIFY_HELD_VERDICT_AGREEMENT == config.REVERIFY_HELD_SPEEDUP_SHARE == 0.95
    report = {
        "verdicts": {"agreement": agree / 20},
        "speedup": {"share_within": None if within is None else within / 20},
    }
    assert held(report)[0] is expected
    assert held({"verdicts": {"agreement": None}, "speedup": {"share_within": None}})[0] is None


def test_speedups_measured_another_way_are_counted_apart_from_those_measured_alike():
    cached = "CUDA events; 100 timed calls; eager from a cached baseline"
    window = "CUDA events; 40 timed calls; PyTorch eager timed the same way in the same window, 4 blocks"
    records = [new("a", "correct", 1.2, timing_method=window), new("b", "correct", 1.0, timing_method=window),
               new("c", "correct", 1.0, timing_method=window.replace("4 blocks", "6 blocks") + "; stopped once settled"),
               new("d", "correct", 1.0)]  # fmt: skip
    recorded = {("1/1", "a"): {**stored("correct", 1.0), "timing_method": cached},
                ("1/1", "b"): {**stored("correct", 1.0), "timing_method": window},
                ("1/1", "c"): {**stored("correct", 1.2), "timing_method": window},  # counts, early stop: the same method
                ("1/1", "d"): {**stored("correct", 1.0), "timing_method": window}}  # fmt: skip
    speedup = build_report(records, recorded)["speedup"]
    assert (speedup["compared"], speedup["within_tolerance"]) == (4, 2)  # the held line still counts every pair
    assert (speedup["other_method"], speedup["same_method_compared"], speedup["same_method_within"]) == (1, 2, 1)
    text = render_markdown(build_report(records, recorded))
    assert "1 of these old speedups were measured by another method" in text
    assert "Of the 2 measured the same way, 1 are within ±5%" in text
    alike = build_report(records[1:2], {("1/1", "b"): recorded[("1/1", "b")]})
    assert alike["speedup"]["other_method"] == 0 and "another method" not in render_markdown(alike)


def test_markdown_has_every_section_and_escapes_cells():
    records = [new("a", "compile_error", error="x | y"), new("b", "correct", 1.0)]
    recorded = {("1/1", "a"): stored("correct", 1.0), ("1/1", "b"): stored("correct", 1.0)}
    report = build_report(records, recorded, {"dataset": "ds", "notes": ["row 3: CUDA kernel needs the cuda backend"]})
    text = render_markdown(report)
    for heading in ("# Re-verification of ds", "## Verdicts", "## Flags", "## Speedup", "## Kernels that moved"):
        assert heading in text
    assert "**did not hold: 50.0% of verdicts agree" in text
    assert "| correct | 1 | 1 | 2 |" in text  # old correct -> new correct, compile_error
    assert "x \\| y" in text and "## Left out by the importer (1)" in text


def test_default_out_and_pattern(tmp_path):
    (tmp_path / "ds").mkdir()
    assert default_out(str(tmp_path / "ds")) == tmp_path / "ds-reverify"
    assert default_out("org/name").name == "name-reverify"
    with pytest.raises(UsageError, match="not a valid regular expression"):
        compile_pattern("(")


def test_command_on_an_export_with_the_fake_verifier(fake_dataset, tmp_path):
    out = tmp_path / "report"
    done = run_fake_cli("reverify", fake_dataset, "--out", out, "--backend", "cpu", "--limit", "5")
    assert done.returncode == 0, done.stderr
    assert "5 kernel(s) re-verified on cpu; held" in done.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["kernels"] == 5 and report["verdicts"]["agreement"] == 1.0 and report["held"] is True
    rows = sum(pq.read_metadata(f).num_rows for f in (fake_dataset / "data").glob("*.parquet"))
    assert report["selection"]["importable"] == rows
    assert (out / "report.md").read_text().startswith("# Re-verification of")
    assert pq.read_table(out / "records.parquet").num_rows == 5


def test_no_written_record_shows_a_secret_the_machine_holds(fake_dataset, tmp_path):
    # A held key that the kernels' texts happen to quote (as a child's error would quote a key it read): the
    # report's records, published like an archive, show it redacted, in the journal and in the Parquet file.
    quoted = "torch::Tensor forward"
    out = tmp_path / "report"
    done = run_fake_cli("reverify", fake_dataset, "--out", out, "--backend", "cpu", "--limit", "3",
                        env=cli_env(EXAMPLE_API_KEY=quoted))  # fmt: skip
    assert done.returncode == 0, done.stderr
    codes = pq.read_table(out / "records.parquet").column("cuda_code").to_pylist()
    assert all("[redacted]" in code and quoted not in code for code in codes)
    assert quoted not in (out / "records.jsonl").read_text()


@pytest.mark.slow  # two real re-verification runs (~15 s)
def test_a_rerun_resumes_after_the_kernels_already_verified(fake_dataset, tmp_path):
    out = tmp_path / "report"
    first = run_fake_cli("reverify", fake_dataset, "--out", out, "--backend", "cpu", "--limit", "3")
    assert first.returncode == 0, first.stderr
    journal = (out / "records.jsonl").read_text().splitlines()
    assert len(journal) == 3
    (out / "records.jsonl").write_text("\n".join(journal) + "\n{torn line of a killed run")
    second = run_fake_cli("reverify", fake_dataset, "--out", out, "--backend", "cpu", "--limit", "5")
    assert second.returncode == 0, second.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["kernels"] == 5
    lines = [line for line in (out / "records.jsonl").read_text().splitlines() if line.startswith('{"')]
    assert len(lines) == 5  # only the two missing kernels were verified this time
    third = run_fake_cli("reverify", fake_dataset, "--out", out, "--backend", "cpu", "--limit", "2", "--restart")
    assert third.returncode == 0, third.stderr
    assert len((out / "records.jsonl").read_text().splitlines()) == 2


def test_report_only_reports_a_cut_off_run_without_verifying(fake_dataset, tmp_path):
    out = tmp_path / "report"
    cut = run_fake_cli("reverify", fake_dataset, "--out", out, "--backend", "cpu", "--limit", "3")
    assert cut.returncode == 0, cut.stderr
    (out / "report.json").unlink()
    journal = (out / "records.jsonl").read_text()
    # The shipped command, no fake: were anything verified, it would take the real (slow) engine.
    done = run_cli("reverify", fake_dataset, "--out", out, "--limit", "5", "--report-only")
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["kernels"] == 3 and report["backend"] == "cpu" and report["selection"]["not_verified"] == 2
    assert "2 selected but not verified" in (out / "report.md").read_text()
    assert (out / "records.jsonl").read_text() == journal  # nothing verified, nothing appended
    empty = run_cli("reverify", fake_dataset, "--out", tmp_path / "none", "--report-only")
    assert empty.returncode == 2 and "no records to report on" in empty.stderr
    both = run_cli("reverify", fake_dataset, "--out", out, "--report-only", "--restart")
    assert both.returncode == 2 and "would forget them" in both.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["nowhere-such-dataset/"], "import source not found"),
        (["{dataset}", "--tasks", "("], "not a valid regular expression"),
        (["{dataset}", "--tasks", "^9/"], "no kernels to re-verify"),
        (["{dataset}", "--backend", "tpu"], "unknown backend"),
    ],
)
def test_command_usage_errors_are_one_line(fake_dataset, tmp_path, args, message):
    args = [a.format(dataset=fake_dataset) for a in args]
    done = run_fake_cli("reverify", *args, "--out", tmp_path / "r")
    assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_the_report_says_whether_the_kernel_or_eager_moved():
    records = [new("a", "correct", 1.0, runtime_ms=10.0, eager_ms=10.0),  # eager moved by 10 %
               new("b", "correct", 1.0, runtime_ms=2.0, eager_ms=2.0),  # neither
               new("c", "correct", 2.0)]  # stores no times: counted in the speedup, not in the halves  # fmt: skip
    recorded = {("1/1", "a"): {**stored("correct", 1.1), "runtime_ms": 10.0, "eager_ms": 11.0},
                ("1/1", "b"): {**stored("correct", 1.0), "runtime_ms": 2.02, "eager_ms": 2.02},
                ("1/1", "c"): stored("correct", 2.0)}  # fmt: skip
    report = build_report(records, recorded)
    speedup = report["speedup"]
    assert (speedup["runtime_compared"], speedup["runtime_within"]) == (2, 2)
    assert (speedup["eager_compared"], speedup["eager_within"]) == (2, 1)
    assert speedup["eager_ratio_quantiles"]["p00"] == pytest.approx(10 / 11, abs=1e-4)
    (moved,) = report["moved"]
    assert (moved["kernel_id"], moved["runtime_ratio"], moved["eager_ratio"]) == ("a", 1.0, pytest.approx(0.9091))
    text = render_markdown(report)
    assert "the kernel's runtime is within ±5% for 2 of 2, eager's for 1 of 2" in text
    assert "| eager |" in text and "| runtime ratio | eager ratio |" in text


def test_how_one_run_of_the_same_rule_came_out_is_not_another_method():
    rule = "CUDA events around each call; 100 timed calls; PyTorch eager timed the same way in the same window"
    outcomes = [
        f"{config.TIMING_SETTLED_CLAUSE} the per-block ratios varied by <= 2%",
        f"{config.EAGER_HELD_CLAUSE}, 0.0302 ms a call, was more than 10% above a clean process's 0.0079 ms: the "
        "speedup rests on 0.00869 ms",
        f"{config.SECOND_LOOK_CLAUSE}, each in a fresh child: the first window's PyTorch eager was slowed (...)",
    ]
    for outcome in outcomes:
        assert same_method(rule, f"{rule}; {outcome}"), outcome
    assert same_method(rule.replace("100", "40"), rule)  # counts aside
    assert not same_method(rule, rule.replace("CUDA events around each call", "the host's clock"))
