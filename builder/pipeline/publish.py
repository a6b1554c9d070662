"""Publish an exported dataset dir to the Hugging Face Hub (create_repo + upload_folder).

The token comes from HF_TOKEN or the huggingface_hub login (`huggingface_hub.get_token()`); HF_ENDPOINT
points the client at another Hub (tests use a loopback server). Past config.UPLOAD_LARGE_FOLDER_BYTES
the resumable `upload_large_folder` is used where this huggingface_hub has it (newer versions fold
resumable, multi-commit uploads into `upload_folder` itself when hf_xet is installed).

A dataset holding any record that a stand-in verifier made (`stand_in_verifier` set: a test's or an
experiment's fake engine, whose verdicts and timings nobody measured) is refused, dry run included: what is
published as verified was verified.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from builder import config
from builder.errors import ArchiveError, UsageError

REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")
SKIPPED_PREFIXES = (".staging-", ".retired-", ".cache", ".git")


@dataclass
class PublishResult:
    repo_id: str
    files: list[tuple[str, int]]  # (path in repo, bytes)
    url: str | None = None
    method: str | None = None  # upload_folder | upload_large_folder; None for a dry run

    @property
    def total_bytes(self) -> int:
        return sum(size for _, size in self.files)


def plan_upload(dataset_dir: Path) -> list[tuple[str, int]]:
    """The files an upload sends, with sizes; the dir must be a finished export."""
    dataset_dir = Path(dataset_dir)
    if not dataset_dir.is_dir():
        raise UsageError(f"{dataset_dir}: no such dataset directory")
    for required in ("README.md", config.EXPORT_INFO_NAME):
        if not (dataset_dir / required).is_file():
            raise UsageError(f"{dataset_dir}: not an exported dataset (no {required}; run `kernel-archive export`)")
    files = []
    for path in sorted(dataset_dir.rglob("*")):
        relative = path.relative_to(dataset_dir)
        if not path.is_file() or any(part.startswith(SKIPPED_PREFIXES) for part in relative.parts):
            continue
        files.append((relative.as_posix(), path.stat().st_size))
    return files


def stand_in_records(dataset_dir: Path) -> dict[str, int]:
    """{stand-in name: records} in the dataset's default config; {} when the real engine made every record (or
    the export predates the field)."""
    import pyarrow.parquet as pq

    from builder.pipeline.export import CONFIG_FOLDERS

    counts: dict[str, int] = {}
    for path in sorted((Path(dataset_dir) / CONFIG_FOLDERS["default"]).glob("*.parquet")):
        if "stand_in_verifier" not in pq.read_schema(path).names:
            continue
        for name in pq.read_table(path, columns=["stand_in_verifier"]).column(0).to_pylist():
            if name is not None:
                counts[name] = counts.get(name, 0) + 1
    return counts


def resolve_token() -> str | None:
    from huggingface_hub import get_token

    return get_token()  # HF_TOKEN first, then the token saved by `hf auth login`


def publish_dataset(dataset_dir: Path, repo_id: str, private: bool = False, dry_run: bool = False) -> PublishResult:
    if not REPO_ID.match(repo_id):
        raise UsageError(f"--repo-id {repo_id!r}: expected ORG/NAME")
    files = plan_upload(dataset_dir)
    if stand_ins := stand_in_records(dataset_dir):
        named = ", ".join(f"{count} by {name}" for name, count in sorted(stand_ins.items()))
        raise ArchiveError(
            f"{dataset_dir}: {sum(stand_ins.values())} record(s) were made by a stand-in verifier ({named}), not "
            "verified: publish refuses them; build those tasks with the real engine and export again"
        )
    result = PublishResult(repo_id=repo_id, files=files)
    if dry_run:
        return result
    token = resolve_token()
    if not token:
        raise ArchiveError("no Hugging Face token: set HF_TOKEN or run `hf auth login` (or use --dry-run)")
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    large = getattr(api, "upload_large_folder", None)
    use_large = callable(large) and result.total_bytes > config.UPLOAD_LARGE_FOLDER_BYTES
    try:
        url = api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        patterns = [path for path, _ in files]
        if use_large:
            large(
                repo_id=repo_id,
                folder_path=str(dataset_dir),
                repo_type="dataset",
                allow_patterns=patterns,
                private=private,
            )
            result.method = "upload_large_folder"
        else:
            api.upload_folder(
                repo_id=repo_id,
                folder_path=str(dataset_dir),
                repo_type="dataset",
                allow_patterns=patterns,
                commit_message="Upload verified kernel archive",
            )
            result.method = "upload_folder"
    except Exception as exc:  # noqa: BLE001 - any Hub/network failure becomes one line, never a traceback
        raise ArchiveError(f"upload to {repo_id} failed: {_one_line(exc)}") from None
    result.url = str(url)
    return result


def _one_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else 'no details'}"[: config.ERROR_TEXT_BYTES]
