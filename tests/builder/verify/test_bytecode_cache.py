"""The byte code sandboxed children read: compiled once by a trusted process, read-only to every child."""

from __future__ import annotations

import os
import sys

import pytest

from builder import config
from builder.verify.sandbox import bytecode_cache
from builder.verify.sandbox.bubblewrap import bwrap_usable
from builder.verify.sandbox.process import run_sandboxed

needs_bwrap = pytest.mark.skipif(not bwrap_usable(), reason="needs a usable bubblewrap")


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """No warm-up remembered, a folder of this test's own, and a module only this test imports."""
    monkeypatch.setattr(bytecode_cache, "_warmed", {})
    folder = tmp_path / "bytecode"
    monkeypatch.setattr(config, "BYTECODE_CACHE_DIR", folder)
    sources = tmp_path / "sources"
    sources.mkdir()
    (sources / "ka_probe_module.py").write_text('VALUE = "compiled"\n')
    monkeypatch.setenv("PYTHONPATH", str(sources))
    monkeypatch.setattr(config, "BYTECODE_WARM_MODULES", ("ka_probe_module",))
    return folder, sources


def _no_second_warm_up(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("a second warm-up ran")

    monkeypatch.setattr(bytecode_cache.subprocess, "run", refuse)


@needs_bwrap
def test_a_bwrap_child_runs_the_warmed_byte_code_and_cannot_write_it(fresh, tmp_path):
    folder, sources = fresh
    source = sources / "ka_probe_module.py"
    assert bytecode_cache.warm() == folder.resolve()
    # Same size, same mtime, other text: only a child that loads the warm-up's .pyc sees "compiled".
    stat = source.stat()
    source.write_text('VALUE = "modified"\n')
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    probe = (
        "import os, sys\n"
        f"sys.path.insert(0, {str(sources)!r})\n"
        "import ka_probe_module\n"
        "print(ka_probe_module.VALUE)\n"
        "try:\n"
        "    open(os.path.join(sys.pycache_prefix, 'planted.pyc'), 'w')\n"
        "    print('wrote')\n"
        "except OSError:\n"
        "    print('read-only')\n"
    )
    outcome = run_sandboxed([sys.executable, "-c", probe], tmp_path / "scratch", 60, gpu=False, isolation="bwrap",
                            ro_binds=[sources])  # fmt: skip
    assert outcome.returncode == 0, outcome.stderr_tail
    assert outcome.stdout_tail.split() == ["compiled", "read-only"]
    assert not (folder / "planted.pyc").exists()


def test_process_isolation_offers_no_folder(fresh, tmp_path, monkeypatch):
    folder, _ = fresh
    monkeypatch.setattr(bytecode_cache, "_warmed", {folder.resolve(): folder.resolve()})
    assert bytecode_cache.for_child("process", []) is None
    probe = "import os; print(os.environ.get('PYTHONPYCACHEPREFIX', 'unset'))"
    outcome = run_sandboxed([sys.executable, "-c", probe], tmp_path / "scratch", 60, gpu=False, isolation="process")
    assert outcome.stdout_tail.strip() == "unset"


def test_a_folder_the_child_may_write_is_not_offered(fresh, tmp_path, monkeypatch):
    folder, _ = fresh
    monkeypatch.setattr(bytecode_cache, "_warmed", {folder.resolve(): folder.resolve()})
    assert bytecode_cache.for_child("bwrap", [tmp_path / "elsewhere"]) == folder.resolve()
    assert bytecode_cache.for_child("bwrap", [tmp_path]) is None
    assert bytecode_cache.for_child("bwrap", [folder.resolve()]) is None


def test_the_completion_marker_spares_a_second_warm_up(fresh, monkeypatch):
    folder, _ = fresh
    assert bytecode_cache.warm() == folder.resolve()
    assert bytecode_cache.completion_marker(folder.resolve(), ("ka_probe_module",)).exists()
    assert list(folder.rglob("ka_probe_module*.pyc")), "the warm-up wrote no byte code"
    monkeypatch.setattr(bytecode_cache, "_warmed", {})  # a new process: only the marker remembers
    _no_second_warm_up(monkeypatch)
    assert bytecode_cache.warm() == folder.resolve()


def test_a_failed_warm_up_offers_nothing_and_is_not_retried(fresh, monkeypatch, caplog):
    folder, _ = fresh
    monkeypatch.setattr(config, "BYTECODE_WARM_MODULES", ("ka_no_such_module",))
    assert bytecode_cache.warm() is None
    assert "ka_no_such_module" in caplog.text
    assert not list(folder.glob(".complete-*"))
    _no_second_warm_up(monkeypatch)
    assert bytecode_cache.for_child("bwrap", []) is None


def test_the_marker_names_the_interpreter_and_the_modules(tmp_path):
    first = bytecode_cache.completion_marker(tmp_path, ("torch",))
    assert first == bytecode_cache.completion_marker(tmp_path, ("torch",))
    assert first != bytecode_cache.completion_marker(tmp_path, ("torch", "torch._dynamo"))


def test_the_default_modules_import_where_torch_does():
    """The configured warm-up list names modules that exist (a typo would silently cost every child)."""
    import importlib.util

    missing = [name for name in config.BYTECODE_WARM_MODULES if importlib.util.find_spec(name) is None]
    assert missing == []


def test_a_warm_up_removes_the_byte_code_of_folders_that_are_gone(fresh, tmp_path):
    """The folder mirrors absolute source paths: an environment deleted since leaves a tree nothing else removes."""
    folder, sources = fresh
    gone = tmp_path / "deleted-venv" / "lib"

    def mirror_of(path):
        return folder / path.relative_to("/")

    mirror_of(gone).mkdir(parents=True)
    (mirror_of(gone) / "module.cpython-312.pyc").write_bytes(b"stale")
    mirror_of(sources).mkdir(parents=True)
    (mirror_of(sources) / "kept.cpython-312.pyc").write_bytes(b"kept")
    (folder / ".complete-0123456789abcdef").write_text("another environment's marker\n")
    assert bytecode_cache.warm() == folder.resolve()
    assert not mirror_of(tmp_path / "deleted-venv").exists()
    assert (mirror_of(sources) / "kept.cpython-312.pyc").read_bytes() == b"kept"
    assert list(mirror_of(sources).glob("ka_probe_module.*.pyc"))  # this warm-up's byte code
    markers = sorted(p.name for p in folder.glob(".complete-*"))
    assert markers == [bytecode_cache.completion_marker(folder.resolve(), ("ka_probe_module",)).name]


def test_nothing_is_pruned_while_every_source_folder_exists(tmp_path):
    folder = tmp_path / "bytecode"
    (folder / tmp_path.relative_to("/") / "src").mkdir(parents=True)
    (tmp_path / "src").mkdir()
    assert bytecode_cache.prune(folder) == 0 and (folder / tmp_path.relative_to("/") / "src").is_dir()
