"""A checkout and a venv anywhere, /tmp included, run sandboxed children: the private /tmp shows what the
interpreter needs (`bubblewrap.interpreter_paths`), read-only and at the same paths."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

from builder import config
from builder.verify.sandbox import bubblewrap

needs_bwrap = pytest.mark.skipif(not bubblewrap.bwrap_usable(), reason="bubblewrap not usable here")

# Run by the /tmp venv's interpreter with the /tmp checkout first on sys.path: one sandboxed child that imports the
# checkout's builder and writes into the checkout (which must stay read-only).
PARENT = """
import json, sys, tempfile
sys.path.insert(0, sys.argv[1])
from builder.verify.sandbox.process import run_sandboxed
child = ("import builder.config, sys, pathlib; print(builder.config.REPO_ROOT, sys.prefix);"
         "pathlib.Path(builder.config.REPO_ROOT, 'written').write_text('x')")
outcome = run_sandboxed([sys.executable, "-c", child], tempfile.mkdtemp(), 60, gpu=False, isolation="bwrap")
print(json.dumps({"rc": outcome.returncode, "out": outcome.stdout_tail, "err": outcome.stderr_tail,
                  "isolation": outcome.isolation}))
"""


@pytest.fixture
def tmp_checkout():
    """A copy of the checkout's packages and a venv, both under /tmp (the venv sees this venv's packages)."""
    root = Path(tempfile.mkdtemp(prefix="ka-binds-", dir="/tmp"))
    checkout = root / "checkout"
    for package in ("builder", "schemas"):
        shutil.copytree(config.REPO_ROOT / package, checkout / package, ignore=shutil.ignore_patterns("__pycache__"))
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    venv = root / "venv"
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    purelib = Path(sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"])
    (purelib / "ka_outer.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    link = root / "link"
    link.symlink_to(venv)  # the venv reached through a link that itself lies under /tmp
    yield root, checkout, venv, link
    shutil.rmtree(root, ignore_errors=True)


@needs_bwrap
@pytest.mark.parametrize("through_link", [False, True], ids=["venv", "linked-venv"])
def test_venv_and_checkout_under_tmp_run_a_sandboxed_child(tmp_checkout, through_link):
    root, checkout, venv, link = tmp_checkout
    python = (link if through_link else venv) / "bin" / "python"
    done = subprocess.run([str(python), "-c", PARENT, str(checkout)], capture_output=True, text=True, timeout=120,
                          cwd=root)  # fmt: skip
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["isolation"] == "bwrap"
    # It started and imported the /tmp checkout under the /tmp venv's prefix, and could not write the checkout.
    assert f"{checkout} {link if through_link else venv}" in outcome["out"], outcome["err"]
    assert "Read-only file system" in outcome["err"]
    assert not (checkout / "written").exists()


def test_interpreter_paths_keep_secrets_hidden(tmp_path, monkeypatch):
    """A venv inside a hidden folder is not shown again: secrets win over the interpreter's binds."""
    hidden = tmp_path / "secret-home"
    hidden.mkdir()
    monkeypatch.setenv("HF_HOME", str(hidden))
    monkeypatch.setattr(sys, "path", [*sys.path, str(hidden / "site")])
    (hidden / "site").mkdir()
    paths = bubblewrap.interpreter_paths()
    assert config.REPO_ROOT in paths
    assert not any(path == hidden or hidden in path.parents for path in paths)


def test_outermost_keeps_only_folders_no_other_contains():
    paths = [Path("/tmp/a/b"), Path("/tmp/a"), Path("/tmp/ab"), Path("/tmp/a/c/d")]
    assert bubblewrap.outermost(paths) == [Path("/tmp/a"), Path("/tmp/ab")]
