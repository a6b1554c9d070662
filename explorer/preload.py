"""Archives opened before the Streamlit server started, handed to the app so it does not open them again.

`kernel-archive explore` opens the source to check it (a bad one is a one-line error before any server starts),
then serves the app in the same process: the app's first page takes that archive from here instead of reading
the Parquet files a second time (about half the cold start on a 2-core box).
"""

from __future__ import annotations

import threading

from explorer.query import Archive

_OPENED: dict[str, Archive] = {}
_LOCK = threading.Lock()


def hand_over(spec: str, archive: Archive) -> None:
    with _LOCK:
        _OPENED[spec] = archive


def take(spec: str) -> Archive | None:
    """The archive opened for `spec`, once (the app caches what it takes); None when there is none."""
    with _LOCK:
        return _OPENED.pop(spec, None)
