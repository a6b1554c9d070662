"""The `import` generator: re-verify kernels that others published.

`--generator import --source PATH_OR_HUB_ID` accepts
- our own archive: an export folder (its `default` config, data/), or Parquet in the record schema; task and
  kernel ids come out as stored (records.py);
- a dataset in the 18-column schema of the best-known public archive: a .parquet/.jsonl file, a folder
  of them, or a Hugging Face Hub dataset id (downloaded via huggingface_hub; offline from its cache when
  HF_HUB_OFFLINE=1) — brings its own tasks (sakana.py);
- a KernelBench generation folder of ModelNew files, or a folder of .cu/.cpp files with manifest.json
  (folders.py) — mapped onto the build's tasks.
Records keep the source's claims (`claimed_correct`, `claimed_speedup`); `claims_summary` counts how
many held.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from builder import config
from builder.errors import UsageError
from builder.generate.base import CandidateStream, Generator
from builder.generate.importers.claims import claims_summary
from builder.generate.importers.folders import is_kernelbench_folder, kernelbench_candidates, manifest_candidates
from builder.generate.importers.records import RecordsImport, is_records_file
from builder.generate.importers.sakana import ROW_FILE_SUFFIXES, SakanaImport
from builder.tasks import Task

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

__all__ = ["ImportGenerator", "claims_summary", "detect_source_kind"]


def detect_source_kind(source: str) -> tuple[str, Path | None]:
    """('records' | 'sakana' | 'kernelbench' | 'manifest' | 'hub', local path or None)."""
    path = Path(source).expanduser()
    if path.is_file():
        if path.suffix in ROW_FILE_SUFFIXES:
            return ("records" if is_records_file(path) else "sakana"), path
        raise UsageError(f"{path}: expected a .parquet/.jsonl dataset file or a folder")
    if path.is_dir():
        return _folder_kind(path)
    if HUB_ID.match(source) and not source.startswith((".", "/")):
        return "hub", None
    raise UsageError(f"import source not found: {source} (a path, or a Hub dataset id like org/name)")


def _folder_kind(path: Path) -> tuple[str, Path]:
    if (path / "manifest.json").is_file():
        return "manifest", path
    export = _export_config(path)
    if export is not None:
        return export
    rows = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in ROW_FILE_SUFFIXES)
    if rows:
        return ("records" if is_records_file(rows[0]) else "sakana"), path
    if is_kernelbench_folder(path):
        return "kernelbench", path
    raise UsageError(
        f"{path}: not an importable folder (no manifest.json, no .parquet/.jsonl files, "
        "no level_<L>_problem_<P>_*.py or level<L>/<P>_*.py ModelNew files)"
    )


def _export_config(path: Path) -> tuple[str, Path] | None:
    """An export folder of ours reads its `default` config (full records), else its `sakana` one; the other
    configs (sft, preference) are not kernels to verify."""
    for kind, folder in (("records", path / "data"), ("sakana", path / "sakana")):
        files = sorted(folder.glob("*.parquet")) if folder.is_dir() else []
        if files and (kind == "sakana" or is_records_file(files[0])):
            return kind, folder
    return None


def hub_snapshot(repo_id: str) -> Path:
    """Local folder of a Hub dataset (from the cache when offline)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        folder = snapshot_download(
            repo_id, repo_type="dataset", allow_patterns=["*.parquet", "*.jsonl", "**/*.parquet"]
        )
    except LocalEntryNotFoundError:
        raise UsageError(f"Hub dataset {repo_id} is not in the local cache and the Hub cannot be reached") from None
    except (HfHubHTTPError, OSError, ValueError) as exc:
        raise UsageError(f"Hub dataset {repo_id}: {str(exc).splitlines()[0]}") from None
    return Path(folder)


class ImportGenerator(Generator):
    name = "import"

    def __init__(
        self, source: str, backend: str = "cuda", out_dir: Path | None = None, levels: list[int] | None = None
    ):
        super().__init__()
        self.source = str(source)
        self.backend = backend
        self.out_dir = Path(out_dir) if out_dir is not None else config.CACHE_DIR / "import"
        self.levels = levels
        self.kind, self.path = detect_source_kind(self.source)
        # (task id, kernel id) -> the verdict the source stored for it (our own archive only)
        self.recorded: dict[tuple[str, str], dict] = {}

    def candidates(self, tasks: Sequence[Task]) -> list:
        label = self.source if self.kind == "hub" else self.path.name
        kind, path = (self.kind, self.path) if self.kind != "hub" else _folder_kind(hub_snapshot(self.source))
        if kind in ("records", "sakana"):
            importer_class = RecordsImport if kind == "records" else SakanaImport
            importer = importer_class(path, label, self.out_dir, self.backend, self.levels)
            chosen = importer.candidates()
            self.notes.extend(importer.notes)
            self._task_by_ref.update(importer.task_by_ref)
            self.generated_tasks.update(importer.tasks)
            self.recorded.update(getattr(importer, "recorded", {}))
            return chosen
        if kind == "kernelbench":
            return kernelbench_candidates(path, tasks, label, self.notes)
        return manifest_candidates(path, tasks, self.backend, label, self.notes)

    def run(self, tasks: Sequence[Task]) -> CandidateStream:
        yield self.candidates(tasks)
