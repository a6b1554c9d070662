"""The archive `kernel-archive explore` opens for the app in the background: scanned at once, ready once serving.

`kernel-archive explore` checks the source (files, schema and record count from the Parquet footers: a bad one is
a one-line error before any server starts) and serves the app in the same process at once. The heavy part runs
in a thread: at once the scan of the light columns into DuckDB (~0.5 s for 100k kernels; DuckDB releases the GIL,
so it overlaps Streamlit's imports on the other core), then, once the server serves, the query layer's imports
(pandas: ~0.5 s holding the GIL, which before that would only slow Streamlit's own start). The thread then
computes the overview page's queries, so the first page finds them done. The first page takes the archive from
here instead of reading the Parquet files a second time.

The garbage collector is off from the start of this open until it ends (`explore` turns it off): the imports
behind the app leave ~120k objects that live as long as the server, and each automatic full collection on the
way walks all of them again (0.2-0.5 s in all on the 2-core box, half of it before the server serves). Once
open, those objects are frozen out of later collections and the collector runs again.
"""

from __future__ import annotations

import atexit
import gc
import http.client
import inspect
import sys
import threading
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING

from builder import config
from builder.errors import ArchiveError
from explorer.sources import ResolvedSource

if TYPE_CHECKING:
    from explorer.query import Archive

_OPENING: dict[str, Future] = {}
_LOCK = threading.Lock()
_release_registered = False


def open_in_background(spec: str, source: ResolvedSource, serving_at: tuple[str, int] | None = None) -> Future:
    """Start opening `source` for the app (after the server at `serving_at` serves, when given); a failure is
    printed as one line and re-raised to the page that takes it (which shows it as a message)."""
    future: Future = Future()

    def run() -> None:
        try:
            open_archive()
        finally:
            freeze_heap()
            gc.enable()  # `explore` turned it off for the start (builder.cli.explore)

    def open_archive() -> None:
        try:
            # First the scan into DuckDB: it releases the GIL, so it runs on the other core while Streamlit
            # imports, instead of competing with the browser loading the app later.
            from explorer.query_base import materialise

            materialised = materialise(source)
            if serving_at is not None:
                wait_until_serving(*serving_at, limit_s=config.EXPLORER_OPEN_AFTER_SERVING_MAX_S)
            from explorer.query import Archive  # pandas (~0.5 s of imports holding the GIL): once serving

            archive = Archive(source, materialised)
        except Exception as exc:  # noqa: BLE001 - never lose a failure in a daemon thread
            if not isinstance(exc, ArchiveError):
                exc = ArchiveError(f"cannot open {source.label}: {exc}")
            print(f"error: {exc}", file=sys.stderr)
            future.set_exception(exc)
            return
        future.set_result(archive)
        try:
            archive.overview()  # the first page's queries; a page asking meanwhile waits for these results
        except Exception:  # noqa: BLE001 - the page runs them again and reports what fails
            pass
        # Streamlit walks the call stack with `inspect` before a process's first element (a REPL check), which
        # fills inspect's cache of every loaded module's file: ~0.12 s with the ~1,300 modules here, on the
        # first page. Filled now, while the browser still loads the app, that check takes milliseconds.
        inspect.getmodule(open_archive.__code__)

    with _LOCK:
        _OPENING[spec] = future
    threading.Thread(target=run, name="explorer-open", daemon=True).start()
    return future


def freeze_heap(collect_first: bool = False) -> None:
    """Take every object alive now out of the garbage collector's walks (`gc.freeze`).

    Streamlit collects garbage after every script run (`runner.postScriptGC`), a full collection that walks
    every tracked object: with the app's imports 0.1-0.25 s holding the GIL on each page and each filter change
    on the 2-core box (measured by gc callbacks), and on the first page while the browser still fetches the
    app's modules. What is alive once the archive (or the query model) is loaded lives as long as the server, so
    later collections need only walk what runs create (~2 ms). `collect_first` clears garbage before it would
    be kept.
    """
    if collect_first:
        gc.collect()
    gc.freeze()
    _register_release_at_exit()


def _release_at_exit() -> None:
    """Let the interpreter's last collection free the archives: frozen objects are never collected, and the
    app's resource cache keeps each archive alive past it. A DuckDB connection still alive when its module is torn
    down makes DuckDB's bindings print a screen of "nanobind: leaked ..." lines (on every Ctrl-C of `explore`)."""
    gc.unfreeze()
    streamlit = sys.modules.get("streamlit")
    if streamlit is not None:
        streamlit.cache_resource.clear()
    gc.collect()


def _register_release_at_exit() -> None:
    global _release_registered
    with _LOCK:
        if not _release_registered:
            atexit.register(_release_at_exit)
            _release_registered = True


def take(spec: str) -> Archive | None:
    """The archive opened for `spec` (waiting for its open), once: the app caches what it takes; None when
    there is none. Raises the ArchiveError the open ended with."""
    with _LOCK:
        future = _OPENING.pop(spec, None)
    return None if future is None else future.result()


def wait_until_serving(address: str, port: int, limit_s: float) -> bool:
    """Poll Streamlit's health endpoint at address:port until an HTTP answer comes (a wildcard address is
    reached on loopback); False when `limit_s` passed first.

    Not a bare connect: Streamlit binds and listens on its socket before it imports its web server and scans
    the installed distributions for components, so connections are accepted ~0.5 s before anything serves.
    Any status will do (a `server.baseUrlPath` in the user's Streamlit config moves the endpoint): an answer
    means the server's own start is over.
    """
    host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(address, address)
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        connection = http.client.HTTPConnection(host, port, timeout=config.EXPLORER_SERVING_POLL_S * 10)
        try:
            connection.request("GET", config.EXPLORER_HEALTH_PATH)
            connection.getresponse()
            return True
        except (OSError, http.client.HTTPException):
            pass
        finally:
            connection.close()
        time.sleep(config.EXPLORER_SERVING_POLL_S)
    return False
