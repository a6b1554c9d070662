"""The byte code that sandboxed children read, compiled once by the trusted parent.

Under bubblewrap a child's root is read-only, so Python cannot write the `.pyc` of a module it had to compile.
Where the environment holds no byte code (installed by uv, which compiles none by default, or by
`pip --no-compile`, or on a read-only image) every child compiled torch's ~1,600 modules again: on an H200 box
11.2 core-s of each child's start-up against 5.8 with byte code (measured). So before the first sandboxed
child the parent imports what children import, in a process of its own that runs no candidate code, with
`PYTHONPYCACHEPREFIX` naming `config.BYTECODE_CACHE_DIR`; children get that folder in their environment,
read-only. Python checks a `.pyc` against its source's size and mtime at every import, so a stale one is never
used, and a module the warm-up did not import is compiled by the child as before.

The folder mirrors absolute source paths, so every new environment adds a tree of its own (~70 MB with torch).
Before a warm-up compiles, the trees of source folders that no longer exist (a deleted virtual environment, an old
checkout) are removed, with the other environments' completion markers: an environment still there compiles again
at its next warm-up rather than trusting a marker whose tree may be gone.

Under process isolation the folder is not offered: a child runs as the parent's user there and could write a
`.pyc` that a later child (the clean reference's among them) would run.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from builder import config

log = logging.getLogger(__name__)

PREFIX_ENV = "PYTHONPYCACHEPREFIX"
_WARM_UP_CODE = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"

_lock = threading.Lock()
_warmed: dict[Path, Path | None] = {}  # folder -> the folder once warm, None when its warm-up failed


def _torch_version() -> str:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "none"


def completion_marker(directory: Path, modules: tuple[str, ...]) -> Path:
    """The marker a finished warm-up leaves: one per interpreter, torch version and list of modules."""
    key = "|".join([sys.executable, sys.version, _torch_version(), *modules])
    return directory / f".complete-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def warm(directory: Path | None = None, modules: tuple[str, ...] | None = None) -> Path | None:
    """The folder of compiled byte code for `modules` (and what they import), compiling it on the first call for
    this interpreter and torch; None when that failed (children then compile what they import, as before).
    Threads that call this together wait for one warm-up."""
    directory = Path(directory or config.BYTECODE_CACHE_DIR).resolve()
    modules = tuple(modules or config.BYTECODE_WARM_MODULES)
    with _lock:
        if directory in _warmed:
            return _warmed[directory]
        marker = completion_marker(directory, modules)
        if not marker.exists():
            if prune(directory):
                for other in directory.glob(".complete-*"):
                    other.unlink(missing_ok=True)
            _warmed[directory] = _compile(directory, modules, marker)
        else:
            _warmed[directory] = directory
        return _warmed[directory]


def prune(directory: Path) -> int:
    """Remove the byte code of source folders that are gone; returns how many trees were removed."""
    removed = 0
    for root, folders, _ in os.walk(directory):
        source = Path("/") / Path(root).relative_to(directory)
        kept = []
        for name in folders:
            if (source / name).is_dir():
                kept.append(name)
            else:
                shutil.rmtree(Path(root) / name, ignore_errors=True)
                removed += 1
        folders[:] = kept
    if removed:
        log.info("removed the byte code of %d source folder(s) that no longer exist from %s", removed, directory)
    return removed


def _compile(directory: Path, modules: tuple[str, ...], marker: Path) -> Path | None:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env[PREFIX_ENV] = str(directory)
    env["PYTHONPATH"] = os.pathsep.join([str(config.REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    log.info("compiling the sandboxed children's byte code into %s (once per environment)", directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([sys.executable, "-c", _WARM_UP_CODE, *modules], env=env, capture_output=True,
                              text=True, timeout=config.BYTECODE_WARM_TIMEOUT_S, check=False)  # fmt: skip
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            log.warning("children compile their own byte code: the warm-up failed (%s)", last)
            return None
        marker.write_text("\n".join(modules) + "\n")
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("children compile their own byte code: the warm-up failed (%s)", exc)
        return None
    return directory


def for_child(isolation: str, writable: list[Path]) -> Path | None:
    """The folder a child started now may read byte code from: only under bubblewrap (read-only there) and only
    where no folder the child may write holds it."""
    if isolation != "bwrap":
        return None
    directory = warm()
    if directory is None:
        return None
    if any(directory == path or path in directory.parents for path in writable):
        return None
    return directory
