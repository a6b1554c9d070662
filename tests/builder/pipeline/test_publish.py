"""`kernel-archive publish` against a loopback Hub: repo creation, files with the token, clear failures, and no
record of a stand-in verifier published."""

from __future__ import annotations

import os

import pytest
from pipeline_fake_hub import FakeHub
from pipeline_helpers import run_cli
from test_store import make_record

from builder.pipeline.publish import plan_upload, stand_in_records
from builder.pipeline.store import Store
from builder.tasks import load_suite


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """An export of records that carry no stand-in stamp, as the real engine's do (test_e2e_cpu publishes a real
    build's export)."""
    build = tmp_path_factory.mktemp("unstamped_build")
    suite = load_suite()
    with Store.open(build) as store:
        for task_id in ("1/1", "1/2", "2/1"):
            store.add_record(make_record(suite.get(task_id), f"// kernel for {task_id}\n"))
    out = tmp_path_factory.mktemp("unstamped_dataset") / "dataset"
    done = run_cli("export", build, "--out", out)
    assert done.returncode == 0, done.stderr
    return out


def hub_env(endpoint: str, token: str | None, home) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")}
    env.update(HF_ENDPOINT=endpoint, HF_HOME=str(home), HF_HUB_OFFLINE="0", HF_HUB_DISABLE_TELEMETRY="1")
    if token:
        env["HF_TOKEN"] = token
    return env


def one_line_error(done, code: int) -> str:
    assert done.returncode == code, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


def test_publish_creates_the_repo_and_uploads_every_file_with_the_token(dataset, tmp_path):
    with FakeHub() as hub:
        done = run_cli(
            "publish",
            dataset,
            "--repo-id",
            "org/kernels",
            "--private",
            env=hub_env(hub.endpoint, "hf_secret", tmp_path),
        )
    assert done.returncode == 0, done.stderr
    assert hub.created == [{"name": "kernels", "organization": "org", "visibility": "private", "type": "dataset"}]
    expected = {path: (dataset / path).read_bytes() for path, _ in plan_upload(dataset)}
    assert hub.files == expected
    assert {r["auth"] for r in hub.requests} == {"Bearer hf_secret"}
    assert any(r["path"].startswith("/api/datasets/org/kernels/commit/") for r in hub.requests)


def test_publish_without_a_token_is_one_line_exit_1(dataset, tmp_path):
    with FakeHub() as hub:
        done = run_cli("publish", dataset, "--repo-id", "org/kernels", env=hub_env(hub.endpoint, None, tmp_path))
    assert "no Hugging Face token" in one_line_error(done, 1)
    assert hub.requests == []


def test_failed_upload_is_one_line_exit_1(dataset, tmp_path):
    with FakeHub(fail_commits=True) as hub:
        done = run_cli("publish", dataset, "--repo-id", "org/kernels", env=hub_env(hub.endpoint, "hf_secret", tmp_path))
    assert "upload to org/kernels failed" in one_line_error(done, 1)


def test_dry_run_lists_files_and_sizes_without_a_token(dataset, tmp_path):
    with FakeHub() as hub:
        done = run_cli(
            "publish", dataset, "--repo-id", "org/kernels", "--dry-run", env=hub_env(hub.endpoint, None, tmp_path)
        )
    assert done.returncode == 0, done.stderr
    assert hub.requests == []
    for path, _ in plan_upload(dataset):
        assert path in done.stdout
    assert "would go to org/kernels" in done.stdout


@pytest.mark.parametrize(("args", "message"), [(["--repo-id", "no-slash"], "expected ORG/NAME"), ([], None)])
def test_bad_arguments_exit_2(tmp_path, args, message):
    if message is None:  # a folder that is not an export
        done = run_cli("publish", tmp_path, "--repo-id", "org/x", "--dry-run")
        assert "not an exported dataset" in one_line_error(done, 2)
    else:
        (tmp_path / "README.md").write_text("x")
        done = run_cli("publish", tmp_path, *args, "--dry-run")
        assert message in one_line_error(done, 2)


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_dataset_with_stand_in_records_is_refused_in_one_line(fake_dataset, tmp_path, dry_run):
    """The pipeline tests' fake verifier made fake_dataset's records: their verdicts were never measured."""
    stand_ins = stand_in_records(fake_dataset)
    assert stand_ins and all(":" in name for name in stand_ins), stand_ins  # module:name of the stand-in
    with FakeHub() as hub:
        args = ["--dry-run"] if dry_run else []
        env = hub_env(hub.endpoint, "hf_secret", tmp_path)
        done = run_cli("publish", fake_dataset, "--repo-id", "org/kernels", *args, env=env)
    line = one_line_error(done, 1)
    assert "stand-in verifier" in line and str(sum(stand_ins.values())) in line, line
    assert hub.requests == []
