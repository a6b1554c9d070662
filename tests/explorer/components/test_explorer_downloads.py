"""The standalone re-verify script: runs in bash, recreates the source byte for byte, calls verify right."""

from __future__ import annotations

import os
import stat
import subprocess

import pytest

from explorer.components.downloads import reverify_script, source_filename

TRICKY_SOURCES = [
    "__global__ void k() {}\n",
    "no trailing newline $HOME `date` \\n",
    "line\nKERNEL_abc_EOF\nEOF\n\n\n",  # contains the natural delimiter and trailing blank lines
]


@pytest.mark.parametrize("code", TRICKY_SOURCES)
def test_script_recreates_source_and_calls_verify(tmp_path, code):
    record = {
        "kernel_id": "abc",
        "task_id": "2/7",
        "language": "cuda",
        "backend": "cuda",
        "cuda_code": code,
        "atol": 1e-4,
        "rtol": 1e-3,
        "suite": "builtin",
        "status": "correct",
    }
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "kernel-archive"  # stands in for the real CLI: records its arguments
    fake.write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@" > "$(dirname "$0")/../args.txt"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    script = tmp_path / "work" / "reverify.sh"
    script.parent.mkdir()
    script.write_text(reverify_script(record))
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    subprocess.run(["bash", str(script)], check=True, env=env, cwd=tmp_path, timeout=30)
    assert (script.parent / source_filename(record)).read_bytes() == code.encode()
    args = (tmp_path / "args.txt").read_text().split("\n")
    assert args[:8] == ["verify", "abc.cu", "--task", "2/7", "--backend", "cuda", "--atol", "0.0001"]
    assert "--json" in args and "--suite" not in args


def test_external_suite_and_language_extension():
    record = {
        "kernel_id": "k1",
        "task_id": "1/1",
        "language": "cpp",
        "backend": "cpu",
        "cuda_code": "int x;",
        "suite": "/data/KernelBench",
    }
    script = reverify_script(record)
    assert source_filename(record) == "k1.cpp"
    assert "--suite /data/KernelBench" in script and "--backend cpu" in script and "--atol" not in script
