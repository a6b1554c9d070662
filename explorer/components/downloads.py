"""What the kernel page offers for download: the source and a standalone re-verify script."""

from __future__ import annotations

import shlex
from typing import Any

EXTENSIONS = {"cuda": ".cu", "cpp": ".cpp", "python": ".py"}


def source_filename(record: dict[str, Any]) -> str:
    return f"{record['kernel_id']}{EXTENSIONS.get(record.get('language') or 'cuda', '.cu')}"


def reverify_script(record: dict[str, Any]) -> str:
    """A bash script that writes the kernel next to itself and re-verifies it with `kernel-archive verify`.

    The kernel text goes into a quoted heredoc (no expansion) whose delimiter includes the kernel id and is
    checked not to occur in the source; `head -c` drops the newline a heredoc always ends with, so the file
    is the recorded source byte for byte (and gets the same kernel_id).
    """
    filename = source_filename(record)
    code = record["cuda_code"] or ""
    delimiter = f"KERNEL_{record['kernel_id']}_EOF"
    while delimiter in code:
        delimiter += "_"
    argv = [
        "kernel-archive",
        "verify",
        filename,
        "--task",
        record["task_id"],
        "--backend",
        record.get("backend") or "cuda",
    ]
    if record.get("atol") is not None and record.get("rtol") is not None:
        argv += ["--atol", repr(float(record["atol"])), "--rtol", repr(float(record["rtol"]))]
    suite = record.get("suite")
    suite_note = ""
    if suite and suite not in ("builtin", "sakana"):
        argv += ["--suite", suite]
        suite_note = f"# The task comes from the external suite {suite!r}: adjust --suite to your checkout.\n"
    recorded = ", ".join(
        f"{name}={record.get(name)}"
        for name in ("status", "runtime_ms", "speedup_eager", "gpu_name")
        if record.get(name) is not None
    )
    return (
        "#!/usr/bin/env bash\n"
        f"# Re-verify kernel {record['kernel_id']} of task {record['task_id']} with the verified-kernel-archive builder.\n"
        f"# Recorded: {recorded.replace(chr(10), ' ')}\n"
        f"{suite_note}"
        "set -euo pipefail\n"
        'cd "$(dirname "$0")"\n'
        f"head -c {len(code.encode())} > {shlex.quote(filename)} <<'{delimiter}'\n{code}\n{delimiter}\n"
        f"{shlex.join(argv)} --json\n"
    )
