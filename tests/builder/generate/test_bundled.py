"""The bundled corpus format: the shipped CPU corpus loads, and every kind of broken manifest is one clear error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from builder import config
from builder.errors import UsageError
from builder.generate import create_generator, drive
from builder.generate.bundled import BundledGenerator, read_task_folder, scan_corpus
from builder.tasks import load_suite

GOOD_MANIFEST = """
[[candidate]]
file = "naive.cpp"
strategy = ["naive"]
verdict = "correct"
description = "plain loops"

[[candidate]]
file = "broken.cpp"
strategy = ["naive", "loop_unrolling"]
verdict = "incorrect"
flags = ["uninitialized_output"]
description = "skips the last row"
"""


def make_corpus(
    root: Path, manifest: str = GOOD_MANIFEST, files=("naive.cpp", "broken.cpp"), folder="level1/1_relu"
) -> Path:
    task_dir = root / "cpu" / folder
    task_dir.mkdir(parents=True)
    for name in files:
        (task_dir / name).write_text(f"// {name}\n#include <torch/extension.h>\n")
    (task_dir / "candidates.toml").write_text(manifest)
    return task_dir


def test_shipped_cpu_corpus_matches_the_builtin_suite():
    suite = load_suite()
    entries = scan_corpus("cpu", tasks=suite.tasks)
    task_ids = {e.task_id for e in entries}
    assert {"1/1", "2/1"} <= task_ids
    verdicts = {e.verdict for e in entries}
    assert "correct" in verdicts and verdicts - {"correct"}  # at least one designed to fail
    assert all(e.description for e in entries)


def test_generator_yields_once_with_provenance(tmp_path, tiny_tasks):
    make_corpus(tmp_path)
    gen = BundledGenerator(backend="cpu", root=tmp_path)
    seen = []

    def verify(batch):
        seen.append(batch)
        return []

    drive(gen, list(tiny_tasks.values()), verify)
    assert len(seen) == 1
    by_name = {c.kernel_name: c for c in seen[0]}
    assert set(by_name) == {"naive", "broken"}
    broken = by_name["broken"]
    assert broken.generator == "bundled" and broken.language == "cpp" and broken.task_id == "1/1"
    assert broken.strategy_declared == ["naive", "loop_unrolling"]
    assert broken.designed_verdict == "incorrect" and broken.designed_flags == ["uninitialized_output"]
    assert broken.source_ref.endswith("broken.cpp") and "// broken.cpp" in broken.source
    assert any("1/2" in note for note in gen.notes)  # tasks without candidates are reported


def test_unselected_tasks_are_not_read(tmp_path, tiny_tasks):
    make_corpus(tmp_path, manifest="not toml at all [[[")
    assert BundledGenerator(backend="cpu", root=tmp_path).candidates([tiny_tasks["1/2"]]) == []


def test_json_manifest_is_equivalent(tmp_path):
    task_dir = make_corpus(tmp_path)
    (task_dir / "candidates.toml").unlink()
    entries = [
        {"file": "naive.cpp", "strategy": ["naive"], "verdict": "correct", "description": "plain loops"},
        {"file": "broken.cpp", "strategy": ["naive"], "verdict": "compile_error", "description": "typo"},
    ]
    (task_dir / "candidates.json").write_text(json.dumps({"candidate": entries}))
    assert [e.verdict for e in read_task_folder(task_dir, "cpu")] == ["correct", "compile_error"]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.replace('"loop_unrolling"', '"magic"'), "broken.cpp: unknown strategy tag(s) magic"),
        (lambda m: m.replace('verdict = "incorrect"', 'verdict = "wrong"'), "broken.cpp: unknown verdict 'wrong'"),
        (lambda m: m.replace('"uninitialized_output"', '"sloppy"'), "broken.cpp: unknown flag(s) sloppy"),
        (
            lambda m: m.replace('verdict = "incorrect"', 'verdict = "correct"'),
            "broken.cpp: verdict 'correct' with disqualifying",
        ),
        (
            lambda m: m.replace('description = "skips the last row"', ""),
            "broken.cpp: 'description' must be one non-empty line",
        ),
        (lambda m: m.replace('file = "broken.cpp"', 'file = "missing.cpp"'), "missing.cpp is listed but"),
        (
            lambda m: (
                m
                + '\n[[candidate]]\nfile = "naive.cpp"\nstrategy = ["naive"]\nverdict = "correct"\ndescription = "again"\n'
            ),
            "naive.cpp is listed twice",
        ),
        (
            lambda m: m.replace(
                'strategy = ["naive"]\nverdict = "correct"', 'strategy = ["naive"]\nverdict = "correct"\nauthor = "me"'
            ),
            "unknown key(s) author",
        ),
        (lambda m: m.replace('file = "naive.cpp"', 'file = "naive.cu"'), "naive.cu: a cpu candidate must end in"),
        (lambda m: "[[[", "not valid TOML"),
    ],
)
def test_broken_manifests_are_one_line_errors(tmp_path, edit, message):
    task_dir = make_corpus(tmp_path, manifest=edit(GOOD_MANIFEST))
    with pytest.raises(UsageError) as info:
        read_task_folder(task_dir, "cpu")
    assert message in str(info.value) and "\n" not in str(info.value)
    assert str(task_dir) in str(info.value)


def test_unlisted_kernel_file_is_an_error(tmp_path):
    task_dir = make_corpus(tmp_path, files=("naive.cpp", "broken.cpp", "extra.cpp"))
    with pytest.raises(UsageError, match=r"extra\.cpp: kernel file not listed in candidates\.toml"):
        read_task_folder(task_dir, "cpu")


def test_folder_must_name_its_task(tmp_path, tiny_tasks):
    make_corpus(tmp_path, folder="level1/1_gelu")
    with pytest.raises(UsageError, match="named 'relu', not 'gelu'"):
        BundledGenerator(backend="cpu", root=tmp_path).candidates(list(tiny_tasks.values()))
    shutil.rmtree(tmp_path / "cpu")
    make_corpus(tmp_path, folder="level1/9_relu")
    with pytest.raises(UsageError, match="no task 1/9"):
        scan_corpus("cpu", root=tmp_path, tasks=list(tiny_tasks.values()))


def test_missing_and_double_manifests(tmp_path):
    task_dir = make_corpus(tmp_path)
    (task_dir / "candidates.json").write_text("{}")
    with pytest.raises(UsageError, match="two manifests"):
        read_task_folder(task_dir, "cpu")
    (task_dir / "candidates.json").unlink()
    (task_dir / "candidates.toml").unlink()
    with pytest.raises(UsageError, match="no manifest"):
        read_task_folder(task_dir, "cpu")


def test_create_generator_names():
    assert isinstance(create_generator("bundled", backend="cpu"), BundledGenerator)
    with pytest.raises(UsageError, match="unknown generator 'magic'"):
        create_generator("magic")
    with pytest.raises(UsageError, match="needs --source"):
        create_generator("import")


def test_strategy_vocabulary_is_documented():
    readme = (config.CANDIDATES_DIR / "README.md").read_text()
    assert all(f"`{tag}`" in readme for tag in config.STRATEGY_TAGS)
