"""The builder version a record carries: the package version plus the commit of the code that verified it."""

from __future__ import annotations

import pickle
import shutil
import subprocess
import sys

import pytest
from packaging.version import Version

import builder
from builder import config
from builder.verify import environment

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def git(root, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, env=env, check=True)
    return done.stdout.strip()


@needs_git
def test_commit_from_git_names_head_and_marks_uncommitted_tracked_changes(tmp_path):
    git(tmp_path, "init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    git(tmp_path, "add", "code.py")
    git(tmp_path, "commit", "-q", "-m", "one")
    head = git(tmp_path, "rev-parse", "HEAD")
    assert environment._commit_from_git(tmp_path) == f"g{head[:12]}"
    (tmp_path / "scratch.txt").write_text("untracked files do not change the code that runs\n")
    assert environment._commit_from_git(tmp_path) == f"g{head[:12]}"
    (tmp_path / "code.py").write_text("x = 2\n")
    assert environment._commit_from_git(tmp_path) == f"g{head[:12]}.dirty"


def test_no_git_checkout_means_no_commit(tmp_path):
    assert environment._commit_from_git(tmp_path) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1a2b3c4d5e6f7a8b9c0d1a2b3c4d5e6f7a8b9c0d", "g1a2b3c4d5e6f"),
        ("g1A2B3C4", "g1a2b3c4"),
        ("1a2b3c4d5e6f.dirty", "g1a2b3c4d5e6f.dirty"),
        ("not-a-commit; rm -rf /", None),
        ("", None),
    ],
)
def test_commit_from_env_accepts_only_commit_ids(monkeypatch, value, expected):
    monkeypatch.setenv(config.BUILDER_COMMIT_ENV, value)
    assert environment._commit_from_env() == expected


def test_builder_version_is_pep440_with_the_commit_from_the_environment_first(monkeypatch):
    monkeypatch.setenv(config.BUILDER_COMMIT_ENV, "abcdef1234567")
    environment.builder_version.cache_clear()
    try:
        version = environment.builder_version()
        assert version == f"{builder.__version__}+gabcdef123456"
        assert str(Version(version)) == version
        monkeypatch.delenv(config.BUILDER_COMMIT_ENV)
        monkeypatch.setattr(environment, "_commit_from_git", lambda root: None)
        environment.builder_version.cache_clear()
        assert environment.builder_version() == builder.__version__
    finally:
        environment.builder_version.cache_clear()


@pytest.fixture
def two_gpus(monkeypatch):
    """nvidia-smi on a box of two GPUs: it lists both whatever CUDA_VISIBLE_DEVICES says."""
    asked: list[str] = []

    def fake_smi(argv):
        if argv[1] == "-L":
            return "GPU 0: NVIDIA H200 (UUID: GPU-aaa)\nGPU 1: NVIDIA H200 (UUID: GPU-bbb)\n"
        asked.append(argv[1])
        return "NVIDIA H200, 9.0, 580.159.04, 143771\n"

    monkeypatch.setattr(environment.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(environment, "_run", fake_smi)
    environment._gpus_present.cache_clear()
    environment._smi_gpu_info.cache_clear()
    yield asked
    environment._gpus_present.cache_clear()
    environment._smi_gpu_info.cache_clear()


@pytest.mark.parametrize(
    ("visible", "expected"),
    [(None, ["0", "1"]), ("1", ["1"]), ("1,0", ["1", "0"]), ("", []), ("0,7,1", ["0"]), ("GPU-bbb", ["GPU-bbb"])],
)
def test_gpus_counted_are_the_visible_ones(two_gpus, monkeypatch, visible, expected):
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert environment.visible_gpu_ids() == expected
    assert environment.gpu_count() == len(expected)


def test_a_visible_gpus_facts_are_read_by_its_own_id(two_gpus, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert environment.gpu_arch(0) == "9.0"
    assert two_gpus == ["--id=1"]  # cuda:0 of this process is the box's GPU 1
    assert environment.gpu_info(1) is None


def test_a_gpus_memory_is_read_with_its_line_and_unknown_where_nvidia_smi_gives_none(two_gpus, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert environment.gpu_memory_gib(0) == pytest.approx(140.4, abs=0.1)
    assert two_gpus == ["--id=1"]  # the same query as the GPU's other facts
    assert environment.gpu_memory_gib(1) is None  # not visible
    monkeypatch.setattr(environment, "_run", lambda argv: "NVIDIA H200, 9.0, 580.159.04, [N/A]\n")
    environment._smi_gpu_info.cache_clear()
    assert environment.gpu_memory_gib(0) is None and environment.gpu_arch(0) == "9.0"


def test_evaluation_children_get_the_visible_gpu_of_their_worker(two_gpus, monkeypatch):
    from builder.verify.engine.children import child_env
    from builder.verify.options import VerifyOptions

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # `--gpus 1` on this box, or a scheduler's choice
    assert child_env(VerifyOptions(backend="cuda", device_index=0))["CUDA_VISIBLE_DEVICES"] == "1"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert child_env(VerifyOptions(backend="cuda", device_index=1))["CUDA_VISIBLE_DEVICES"] == "1"


def test_an_engine_takes_what_the_builder_read_of_the_machine_instead_of_reading_it_again(two_gpus, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    import torch  # noqa: F401 - loaded here, so its versions are among the facts

    facts = environment.known_facts()
    assert facts["gpus_present"] == 2 and facts["gpu_info"] == {"1": {"name": "NVIDIA H200",
            "compute_capability": "9.0", "driver_version": "580.159.04", "memory_mib": "143771"}}  # fmt: skip
    assert facts["torch_versions"][0] == torch.__version__ and facts["builder_version"]
    # plain data: an engine reads them without loading torch (it loads torch beside its first clean references)
    probe = "import pickle, sys; pickle.loads(sys.stdin.buffer.read()); print('torch' in sys.modules)"
    read = subprocess.run([sys.executable, "-c", probe], input=pickle.dumps(facts), capture_output=True, check=True)
    assert read.stdout.decode().strip() == "False"
    expected = environment.environment_fields("cuda")
    # in the engine: nothing is run again, and its records name the same environment
    monkeypatch.setattr(environment, "_run", lambda argv: pytest.fail(f"ran {argv} again"))
    monkeypatch.setattr(environment, "_commit_from_git", lambda root: pytest.fail("asked git again"))
    environment.adopt(facts)
    try:
        assert environment.environment_fields("cuda") == expected
        assert environment.gpu_count() == 1
    finally:
        environment.adopt({})  # this process reads for itself again
    assert environment._GIVEN == {}
