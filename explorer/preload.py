"""The archive `kernel-archive explore` opens while the Streamlit server starts, handed to the app so it opens once.

`kernel-archive explore` checks the source (files, schema, record count: a bad one is a one-line error before any
server starts), then starts opening it in a thread and serves the app in the same process at once: the archive's
open (materialising its light columns, ~0.7 s for 100k kernels, inside DuckDB without the GIL) overlaps with
Streamlit's start and the browser loading the app. The first page takes the archive from here, waiting for the
open to finish, instead of reading the Parquet files a second time.
"""

from __future__ import annotations

import sys
import threading
from concurrent.futures import Future

from builder.errors import ArchiveError
from explorer.query import Archive
from explorer.sources import ResolvedSource

_OPENING: dict[str, Future] = {}
_LOCK = threading.Lock()


def open_in_background(spec: str, source: ResolvedSource) -> Future:
    """Start opening `source` for the app; a failure is printed as one line and re-raised to the page that
    takes it (which shows it as a message)."""
    future: Future = Future()

    def run() -> None:
        try:
            future.set_result(Archive(source))
        except Exception as exc:  # noqa: BLE001 - never lose a failure in a daemon thread
            if not isinstance(exc, ArchiveError):
                exc = ArchiveError(f"cannot open {source.label}: {exc}")
            print(f"error: {exc}", file=sys.stderr)
            future.set_exception(exc)

    with _LOCK:
        _OPENING[spec] = future
    threading.Thread(target=run, name="explorer-open", daemon=True).start()
    return future


def take(spec: str) -> Archive | None:
    """The archive opened for `spec` (waiting for its open), once: the app caches what it takes; None when
    there is none. Raises the ArchiveError the open ended with."""
    with _LOCK:
        future = _OPENING.pop(spec, None)
    return None if future is None else future.result()
