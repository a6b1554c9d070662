"""The `bundled` generator: hand-written candidates shipped under data/candidates/.

Layout (data/candidates/README.md is the user-facing description):

    data/candidates/<cuda|cpu>/level<L>/<N>_<task_name>/<kernel_name>.<cu|cpp>
    data/candidates/<cuda|cpu>/level<L>/<N>_<task_name>/candidates.toml   (or candidates.json)

The manifest lists every kernel file of its folder exactly once with its strategy tags, the verdict it
is designed to get, the flags it is designed to raise and a one-line description. Anything else (an
unknown tag, verdict or flag, a listed file that is missing, a kernel file that is not listed) is a
one-line UsageError naming the file, so a broken corpus never half-loads.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from builder import config
from builder.candidates import Candidate
from builder.errors import UsageError
from builder.generate.base import CandidateStream, Generator
from builder.tasks import Task
from schemas import STATUSES, disqualifying_flags, flag_vocabulary

BACKEND_FOLDERS = {"cuda": "cuda", "cpu": "cpu"}
# Kernel files a folder may hold per backend; a .py file is a KernelBench-style ModelNew.
KERNEL_SUFFIXES = {"cuda": (".cu", ".py"), "cpu": (".cpp", ".cc", ".py")}
ALL_KERNEL_SUFFIXES = (".cu", ".cpp", ".cc", ".py")
ENTRY_KEYS = {"file", "strategy", "verdict", "flags", "description"}
LEVEL_FOLDER = re.compile(r"^(?:level_?)?(\d+)$")
TASK_FOLDER = re.compile(r"^(\d+)_(\w+)$")


@dataclass(frozen=True)
class BundledEntry:
    """One manifest line: a kernel file and what its author designed it to do."""

    path: Path
    level: int
    task_number: int
    task_name: str
    strategy: tuple[str, ...]
    verdict: str
    flags: tuple[str, ...] = field(default_factory=tuple)
    description: str = ""

    @property
    def task_id(self) -> str:
        return f"{self.level}/{self.task_number}"

    def candidate(self, task_id: str | None = None) -> Candidate:
        return Candidate.from_file(
            self.path,
            task_id=task_id or self.task_id,
            generator="bundled",
            strategy_declared=list(self.strategy),
            designed_verdict=self.verdict,
            designed_flags=list(self.flags),
            source_ref=_repo_relative(self.path),
        )


def _repo_relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(config.REPO_ROOT))
    except ValueError:
        return str(path)


def corpus_root(backend: str, root: Path | None = None) -> Path:
    if backend not in BACKEND_FOLDERS:
        raise UsageError(f"unknown backend '{backend}' (expected one of {', '.join(BACKEND_FOLDERS)})")
    return Path(root if root is not None else config.CANDIDATES_DIR) / BACKEND_FOLDERS[backend]


def _load_manifest_data(task_dir: Path) -> tuple[Path, list]:
    found = [task_dir / name for name in config.CANDIDATE_MANIFESTS if (task_dir / name).is_file()]
    if not found:
        raise UsageError(f"{task_dir}: no manifest (expected one of {', '.join(config.CANDIDATE_MANIFESTS)})")
    if len(found) > 1:
        raise UsageError(f"{task_dir}: two manifests ({found[0].name}, {found[1].name}); keep one")
    manifest = found[0]
    try:
        text = manifest.read_text()
        data = tomllib.loads(text) if manifest.suffix == ".toml" else json.loads(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{manifest}: unreadable ({exc})") from None
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{manifest}: not valid {manifest.suffix[1:].upper()} ({exc})") from None
    if not isinstance(data, dict) or set(data) != {"candidate"} or not isinstance(data["candidate"], list):
        raise UsageError(f"{manifest}: expected only a 'candidate' list of entries (see data/candidates/README.md)")
    return manifest, data["candidate"]


def _check_entry(manifest: Path, index: int, entry: object, backend: str) -> tuple[str, tuple, str, tuple, str]:
    where = f"{manifest} entry {index + 1}"
    if not isinstance(entry, dict):
        raise UsageError(f"{where}: expected a table/object")
    unknown = sorted(set(entry) - ENTRY_KEYS)
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(unknown)} (allowed: {', '.join(sorted(ENTRY_KEYS))})")
    name = entry.get("file")
    if not isinstance(name, str) or not name or "/" in name or "\\" in name:
        raise UsageError(f"{where}: 'file' must be a file name in the manifest's folder")
    where = f"{manifest}: {name}"
    if Path(name).suffix not in KERNEL_SUFFIXES[backend]:
        raise UsageError(f"{where}: a {backend} candidate must end in {' or '.join(KERNEL_SUFFIXES[backend])}")
    strategy = entry.get("strategy")
    if not isinstance(strategy, list) or not strategy or not all(isinstance(t, str) for t in strategy):
        raise UsageError(f"{where}: 'strategy' must be a non-empty list of tags")
    bad_tags = sorted(set(strategy) - set(config.STRATEGY_TAGS))
    if bad_tags:
        raise UsageError(
            f"{where}: unknown strategy tag(s) {', '.join(bad_tags)} (allowed: {', '.join(config.STRATEGY_TAGS)})"
        )
    verdict = entry.get("verdict")
    if verdict not in STATUSES:
        raise UsageError(f"{where}: unknown verdict {verdict!r} (allowed: {', '.join(STATUSES)})")
    flags = entry.get("flags", [])
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise UsageError(f"{where}: 'flags' must be a list of flag names")
    bad_flags = sorted(set(flags) - set(flag_vocabulary()))
    if bad_flags:
        raise UsageError(f"{where}: unknown flag(s) {', '.join(bad_flags)} (allowed: {', '.join(flag_vocabulary())})")
    # The verifier forces `incorrect` when a disqualifying flag is raised: a manifest claiming
    # otherwise describes a verdict that cannot happen.
    if verdict == "correct" and set(flags) & disqualifying_flags():
        raise UsageError(
            f"{where}: verdict 'correct' with disqualifying flag(s) {sorted(set(flags) & disqualifying_flags())}"
        )
    description = entry.get("description")
    if not isinstance(description, str) or not description.strip() or "\n" in description.strip():
        raise UsageError(f"{where}: 'description' must be one non-empty line")
    return name, tuple(strategy), verdict, tuple(flags), description.strip()


def read_task_folder(task_dir: Path, backend: str) -> list[BundledEntry]:
    """Validate one task folder's manifest against its files and return its entries."""
    task_dir = Path(task_dir)
    level_match = LEVEL_FOLDER.match(task_dir.parent.name)
    task_match = TASK_FOLDER.match(task_dir.name)
    if not level_match or not task_match:
        raise UsageError(f"{task_dir}: candidate folders are named level<L>/<N>_<task_name>")
    manifest, raw_entries = _load_manifest_data(task_dir)
    entries: list[BundledEntry] = []
    listed: set[str] = set()
    for index, raw in enumerate(raw_entries):
        name, strategy, verdict, flags, description = _check_entry(manifest, index, raw, backend)
        if name in listed:
            raise UsageError(f"{manifest}: {name} is listed twice")
        listed.add(name)
        path = task_dir / name
        if not path.is_file():
            raise UsageError(f"{manifest}: {name} is listed but {path} does not exist")
        entries.append(
            BundledEntry(
                path=path,
                level=int(level_match.group(1)),
                task_number=int(task_match.group(1)),
                task_name=task_match.group(2),
                strategy=strategy,
                verdict=verdict,
                flags=flags,
                description=description,
            )
        )
    for file in sorted(task_dir.iterdir()):
        if file.is_file() and file.suffix in ALL_KERNEL_SUFFIXES and file.name not in listed:
            raise UsageError(f"{file}: kernel file not listed in {manifest.name}")
    return entries


def task_folders(backend: str, root: Path | None = None) -> list[Path]:
    base = corpus_root(backend, root)
    if not base.is_dir():
        return []
    folders = []
    for level_dir in sorted(p for p in base.iterdir() if p.is_dir()):
        if not LEVEL_FOLDER.match(level_dir.name):
            raise UsageError(f"{level_dir}: expected level folders named level<L>")
        folders.extend(sorted(p for p in level_dir.iterdir() if p.is_dir()))
    return folders


def scan_corpus(backend: str, root: Path | None = None, tasks: Sequence[Task] | None = None) -> list[BundledEntry]:
    """Every entry of the corpus (validated). With `tasks`, folders must name a task of them by id and name."""
    by_id = {t.id: t for t in tasks} if tasks is not None else None
    entries: list[BundledEntry] = []
    for folder in task_folders(backend, root):
        folder_entries = read_task_folder(folder, backend)
        if by_id is not None and folder_entries:
            first = folder_entries[0]
            task = by_id.get(first.task_id)
            if task is None:
                raise UsageError(f"{folder}: no task {first.task_id} in the suite")
            if task.name != first.task_name:
                raise UsageError(f"{folder}: task {task.id} is named '{task.name}', not '{first.task_name}'")
        entries.extend(folder_entries)
    return entries


class BundledGenerator(Generator):
    """Yields the bundled candidates of the given tasks once (the offline default)."""

    name = "bundled"

    def __init__(self, backend: str = "cuda", root: Path | None = None) -> None:
        super().__init__()
        self.backend = backend
        self.root = root

    def candidates(self, tasks: Sequence[Task]) -> list[Candidate]:
        by_id = {t.id: t for t in tasks}
        chosen: list[Candidate] = []
        for folder in task_folders(self.backend, self.root):
            level_match = LEVEL_FOLDER.match(folder.parent.name)
            task_match = TASK_FOLDER.match(folder.name)
            task_id = f"{int(level_match.group(1))}/{int(task_match.group(1))}" if level_match and task_match else None
            if task_id not in by_id:
                continue  # a task outside this build's selection: not read at all
            entries = read_task_folder(folder, self.backend)
            task = by_id[task_id]
            if entries and entries[0].task_name != task.name:
                raise UsageError(f"{folder}: task {task.id} is named '{task.name}', not '{entries[0].task_name}'")
            chosen.extend(entry.candidate(task.id) for entry in entries)
        for task in tasks:
            if not any(c.task_id == task.id for c in chosen):
                self.notes.append(f"{task.id} {task.name}: no bundled {self.backend} candidates")
        return chosen

    def run(self, tasks: Sequence[Task]) -> CandidateStream:
        yield self.candidates(tasks)
