"""The files a child and its parent exchange in the child's scratch folder (both sides import it): the result, written
whole and renamed so that the parent never reads half of it, and the words of the device hand-shake
(docs/architecture.md, "Sharing a device")."""

from __future__ import annotations

import json
import math
import os
import secrets
from pathlib import Path
from typing import Any


def write_word(path: Path, word: str) -> None:
    """Put the parent's word where a child waits for it. The directory is the child's to write: a name it could
    have prepared (a link to one of the parent's files) is never opened, so the word goes to an unguessable new
    file first (O_EXCL, O_NOFOLLOW) and is renamed over `path` (a rename replaces a link, never follows it)."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as handle:
        handle.write(word)
    os.replace(temporary, path)


def yield_words(pause_path: Path, round_: int) -> tuple[Path, Path, Path]:
    """Round `round_` of a checking child's yield: the parent's `pause.N`, the child's `paused.N`, the parent's
    `resume.N` (files next to `pause_path`, in the child's scratch)."""
    return (pause_path.with_name(f"{pause_path.name}.{round_}"), pause_path.with_name(f"paused.{round_}"),
            pause_path.with_name(f"resume.{round_}"))  # fmt: skip


def _finite(value: Any) -> Any:
    """JSON without NaN/Infinity: non-finite numbers become null (the parent parses strict JSON)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def write_result(path: str | Path, result: dict[str, Any]) -> None:
    """Write the result next to its final name, then rename: the parent never reads half a file."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(_finite(result), default=str, allow_nan=False))
    os.replace(temporary, path)


MAX_RESULT_BYTES = 16 << 20  # a result file larger than this is not a result: crash


def read_result(path: Path) -> dict[str, Any] | None:
    """The child's result JSON, or None when missing, oversized or not a JSON object."""
    try:
        if path.stat().st_size > MAX_RESULT_BYTES:
            return None
        data = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None
