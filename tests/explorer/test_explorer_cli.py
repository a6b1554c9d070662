"""`kernel-archive explore`: bad sources are one line + exit 2; good ones start streamlit with the source."""

from __future__ import annotations

import contextlib
import gc
import http.server
import os
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from builder import config
from builder.cli import explore as explore_cli
from builder.errors import UsageError


def _cli(*args: str) -> subprocess.CompletedProcess:
    code = "from builder.cli import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, "explore", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=config.REPO_ROOT,
    )


def test_wrong_schema_is_one_line_and_exit_2(tmp_path):
    pq.write_table(pa.table({"x": [1]}), tmp_path / "t.parquet")
    result = _cli(str(tmp_path / "t.parquet"), "--check")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "missing required column" in lines[0]
    assert "Traceback" not in result.stderr


def test_check_reports_the_source(synthetic_dir, capsys):
    explore_cli.explore(str(synthetic_dir), port=8599, address="127.0.0.1", check_only=True)
    assert "300 kernels (synthetic archive" in capsys.readouterr().err


@contextlib.contextmanager
def _healthy_server(port: int = 0) -> Iterator[int]:
    """Stands in for the Streamlit server the open waits for: answers HTTP (200 at its health path, 404 elsewhere,
    as under a `server.baseUrlPath`); yields the port."""

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the name http.server calls
            self.send_response(200 if self.path == config.EXPLORER_HEALTH_PATH else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _free_port() -> int:
    with socket.socket() as reserved:  # nothing listens on it once closed
        reserved.bind(("127.0.0.1", 0))
        return reserved.getsockname()[1]


def test_launch_serves_the_checked_archive_in_process(synthetic_dir, monkeypatch):
    from streamlit.web import cli as streamlit_cli

    from explorer import preload

    seen = {}

    def fake_main(args, prog_name, standalone_mode):
        spec = os.environ[config.EXPLORER_SOURCE_ENV]
        seen.update(args=args, spec=spec, handed_over=preload.take(spec))

    monkeypatch.setattr(streamlit_cli, "main", fake_main)
    monkeypatch.delenv(config.EXPLORER_SOURCE_ENV, raising=False)
    monkeypatch.setattr(config, "EXPLORER_OPEN_AFTER_SERVING_MAX_S", 60.0)
    with _healthy_server() as port:
        explore_cli.explore(str(synthetic_dir), port=port, address="127.0.0.1", check_only=False)
    args = seen["args"]
    assert args[:2] == ["run", str(config.REPO_ROOT / "explorer" / "app.py")]
    assert args[args.index("--server.port") + 1] == str(port) and args[args.index("--server.headless") + 1] == "true"
    assert args[args.index("--client.toolbarMode") + 1] == "viewer"  # no Deploy button, no developer menu
    assert seen["spec"] == str(synthetic_dir)
    # The app takes the archive the launch opened (once) instead of reading the Parquet files again.
    assert seen["handed_over"] is not None and seen["handed_over"].size == 300
    assert preload.take(seen["spec"]) is None


def test_the_scan_runs_at_once_the_query_layer_once_the_server_serves_and_warms_the_overview(
    synthetic_dir, monkeypatch
):
    import explorer.query as query
    import explorer.query_base as query_base
    from explorer import preload
    from explorer.sources import resolve_source

    events = []
    real_materialise, real_init = query_base.materialise, query.Archive.__init__

    def archive_init(self, source, materialised=None):
        events.append(("archive", materialised is not None))
        real_init(self, source, materialised)

    monkeypatch.setattr(query_base, "materialise", lambda source: events.append("scan") or real_materialise(source))
    monkeypatch.setattr(query.Archive, "__init__", archive_init)
    port = _free_port()
    future = preload.open_in_background("wait-spec", resolve_source(str(synthetic_dir)), serving_at=("0.0.0.0", port))
    time.sleep(1.0)
    # The scan (GIL-free) ran while Streamlit would be starting; the query layer (pandas) waits for the server.
    assert events == ["scan"] and not future.done()
    with socket.create_server(("127.0.0.1", port)):  # Streamlit listens long before it serves: still waiting
        time.sleep(1.0)
        assert events == ["scan"] and not future.done()
    with _healthy_server(port):
        archive = preload.take("wait-spec")
        assert archive.size == 300
        assert events == ["scan", ("archive", True)]  # the archive took the scanned connection, no second scan
        _join_background_opens()  # the open's thread ends once it has run the overview's queries
    # The overview's queries were computed in the background: the page's own call finds every one cached.
    computed = []
    original = archive.cursor
    archive.cursor = lambda: computed.append(1) or original()
    overview = archive.overview()
    assert computed == [] and overview.totals["kernels"] == 300


def _join_background_opens() -> None:
    for thread in threading.enumerate():
        if thread.name == "explorer-open":
            thread.join(timeout=60)


def test_the_collector_is_off_while_the_server_starts_and_on_with_the_heap_frozen_once_open(synthetic_dir, monkeypatch):
    from streamlit.web import cli as streamlit_cli

    from explorer import preload

    seen = {}
    monkeypatch.setattr(streamlit_cli, "main", lambda **_: seen.update(collecting=gc.isenabled()))
    monkeypatch.delenv(config.EXPLORER_SOURCE_ENV, raising=False)
    monkeypatch.setattr(config, "EXPLORER_OPEN_AFTER_SERVING_MAX_S", 60.0)
    port = _free_port()
    frozen_before = gc.get_freeze_count()
    try:
        explore_cli.explore(str(synthetic_dir), port=port, address="127.0.0.1", check_only=False)
        assert seen == {"collecting": False}  # Streamlit's imports ran without full collections
        with _healthy_server(port):  # the server serves: the archive opens
            assert preload.take(str(synthetic_dir)).size == 300
            _join_background_opens()
        assert gc.isenabled()
        assert gc.get_freeze_count() > frozen_before  # what the open left alive is out of later collections
    finally:
        gc.enable()


def test_freeze_heap_collects_garbage_first_and_keeps_what_lives_out_of_later_collections():
    from explorer.preload import freeze_heap

    class Node:
        pass

    gc.disable()  # no automatic collection may free the cycle before freeze_heap
    try:
        garbage = Node()
        garbage.me = garbage  # a cycle: only the collector frees it
        garbage_ref = weakref.ref(garbage)
        del garbage
        live = [Node() for _ in range(1000)]
        frozen_before = gc.get_freeze_count()
        freeze_heap(collect_first=True)
    finally:
        gc.enable()
    assert garbage_ref() is None  # collected before the freeze, not kept for the server's life
    assert gc.get_freeze_count() >= frozen_before + len(live)
    tracked = {id(obj) for obj in gc.get_objects()}
    assert not any(id(node) in tracked for node in live)  # later collections do not walk them


ARCHIVE_HELD_AT_EXIT = """
import sys
import streamlit as st
from explorer import preload
from explorer.query import open_archive

@st.cache_resource
def opened(spec):  # as the app holds it (explorer.components.context)
    return open_archive(spec)

assert opened(sys.argv[1]).size == 300
preload.freeze_heap(collect_first=True)  # as the background open and the warm-up leave it
"""


def test_an_archive_the_app_holds_is_released_at_exit_without_duckdbs_leak_report(synthetic_dir):
    done = subprocess.run([sys.executable, "-c", ARCHIVE_HELD_AT_EXIT, str(synthetic_dir)], cwd=config.REPO_ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "leaked" not in done.stderr, done.stderr[-2000:]  # what every Ctrl-C of `explore` printed


def test_wait_until_serving_gives_up_after_its_limit_and_wants_an_answer_not_a_connection():
    from explorer.preload import wait_until_serving

    start = time.monotonic()
    assert wait_until_serving("127.0.0.1", _free_port(), limit_s=0.3) is False
    assert 0.3 <= time.monotonic() - start < 5
    with socket.create_server(("127.0.0.1", 0)) as listening_only:
        assert wait_until_serving("127.0.0.1", listening_only.getsockname()[1], limit_s=0.5) is False
    with _healthy_server() as port:
        assert wait_until_serving("0.0.0.0", port, limit_s=10) is True  # a wildcard address: asked on loopback


def test_missing_source_raises_usage_error(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        explore_cli.explore(str(tmp_path / "nope"), port=8599, address="127.0.0.1", check_only=True)


def test_launch_refuses_an_empty_source_before_serving(synthetic_dir, tmp_path, monkeypatch):
    from streamlit.web import cli as streamlit_cli

    first = sorted(synthetic_dir.glob("data/*.parquet"))[0]
    pq.write_table(pq.read_schema(first).empty_table(), tmp_path / "empty.parquet")
    monkeypatch.setattr(streamlit_cli, "main", lambda **_: pytest.fail("served an empty source"))
    with pytest.raises(UsageError, match="holds no kernel records"):
        explore_cli.explore(str(tmp_path / "empty.parquet"), port=8599, address="127.0.0.1", check_only=False)


def test_a_failed_background_open_reaches_the_terminal_and_the_page(synthetic_dir, tmp_path, capsys):
    from builder.errors import ArchiveError
    from explorer import preload
    from explorer.sources import resolve_source

    resolved = resolve_source(str(synthetic_dir))
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    for f in resolved.files:  # right footers (the launch check passes), data pages overwritten
        data = bytearray(f.read_bytes())
        data[4 : len(data) // 2] = b"\0" * (len(data) // 2 - 4)
        (damaged / f.name).write_bytes(bytes(data))
    broken = resolve_source(str(damaged))
    assert broken.count_records() == resolved.count_records()
    gc.disable()  # as `explore` leaves it for the open
    try:
        preload.open_in_background("damaged-spec", broken).exception(timeout=60)
        _join_background_opens()
        assert gc.isenabled()  # a failed open turns the collector back on too
    finally:
        gc.enable()
    with pytest.raises(ArchiveError, match="cannot"):
        preload.take("damaged-spec")
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    assert preload.take("damaged-spec") is None  # taken once; the page then opens (and reports) by itself
