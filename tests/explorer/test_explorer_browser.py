"""End to end in headless Chromium: `kernel-archive explore` serves the app, every page opens, links work,
the WebGL map draws. Screenshots land in the pytest tmp dir (printed with -s)."""

from __future__ import annotations

import contextlib
import io
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urlparse

import pytest

from builder import config
from explorer.filters import Filters

CHROMIUM = Path(config.EXPLORER_CHROMIUM)
WAIT_MS = 90_000  # a loaded 2-core CI box; pages normally render in a second or two

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,  # a Streamlit server driven by headless Chromium, page by page
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian chromium at /usr/bin/chromium"),
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def _serving(source: Path) -> Iterator[str]:
    """`kernel-archive explore SOURCE` on a free port, as a user starts it; yields its URL once healthy."""
    port = _free_port()
    code = "from builder.cli import main; main()"
    process = subprocess.Popen(
        [sys.executable, "-c", code, "explore", str(source), "--port", str(port)],
        cwd=config.REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            try:
                if urllib.request.urlopen(f"{url}{config.EXPLORER_HEALTH_PATH}", timeout=2).status == 200:
                    break
            except OSError:
                if process.poll() is not None:
                    pytest.fail(f"explorer exited: {process.stdout.read().decode(errors='replace')[-2000:]}")
                time.sleep(0.5)
        else:
            pytest.fail("explorer did not become healthy within 120 s")
        yield url
    finally:
        os.killpg(process.pid, 15)  # our own process group: the CLI and the streamlit it started
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def server(synthetic_dir):
    with _serving(synthetic_dir) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=list(config.EXPLORER_CHROMIUM_ARGS))
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    tab = context.new_page()
    yield tab
    context.close()


PAGE_DRAWN = """(charts) => {
  const q = (s) => [...document.querySelectorAll(s)];
  const plotly = q('[data-testid="stPlotlyChart"]'), vega = q('[data-testid="stVegaLiteChart"]');
  return !document.querySelector('[data-testid="stStatusWidget"]')
    && !document.querySelector('[data-testid="stSkeleton"]')
    && plotly.every(c => c.querySelector('.main-svg')) && vega.every(c => c.querySelector('canvas, svg'))
    && plotly.length + vega.length >= charts;
}"""


def open_page(page, url: str, heading: str, charts: int = 0):
    page.goto(url)
    page.get_by_role("heading", level=1).filter(has_text=heading).first.wait_for(timeout=WAIT_MS)
    # Rerun finished, no skeleton left where a lazily loaded element goes, every chart drawn (Plotly: its SVG;
    # Vega-Lite: its canvas): screenshots show whole pages.
    page.wait_for_function(PAGE_DRAWN, arg=charts, timeout=WAIT_MS)
    assert page.locator('[data-testid="stException"]').count() == 0, f"exception shown on {url}"
    # Every page, however reached, carries the style that stops skeleton shimmer (software compositing)
    assert page.evaluate(STILL_SKELETONS_APPLIED), f"skeletons still shimmer on {url}"
    # Viewer mode: readers get no "Deploy" button and no developer options.
    assert page.locator('[data-testid="stAppDeployButton"]').count() == 0, f"Deploy button on {url}"


STILL_SKELETONS_APPLIED = """() => [...document.querySelectorAll('[data-testid="stHtml"] style')]
  .some(s => s.textContent.includes('stSkeleton') && s.textContent.includes('animation: none'))"""


def test_every_page_opens(server, page, synthetic_archive, tmp_path):
    best = synthetic_archive.best_per_task()
    a, b = best["kernel_id"].iloc[0], best["kernel_id"].iloc[1]
    pages = [
        ("/", "Verified kernel archive"),
        ("/leaderboard?level=2", "Leaderboard"),
        ("/task?id=1/1", "Task 1/1"),
        (f"/kernel?id={a}", best["kernel_name"].iloc[0]),
        ("/map", "Map of the archive"),
        ("/search?q=__shfl_down_sync", "Search"),
        (f"/compare?a={a}&b={b}", "Compare kernels"),
    ]
    charts = {"/": 5, "/task?id=1/1": 2, "/map": 1}  # charts each page draws (they load lazily)
    for path, heading in pages:
        open_page(page, server + path, heading, charts.get(path, 0))
        page.screenshot(path=str(tmp_path / f"{path.strip('/').split('?')[0] or 'overview'}.png"), full_page=True)
    print(f"screenshots: {tmp_path}")


LEADERBOARD_COLUMNS = ["Task", "Kernel", "Speedup vs eager (×)", "Speedup vs torch.compile (×)", "Runtime (ms)"]
# The grid draws on a canvas; its accessible table mirrors headers and cell values (a link cell: its URL).
GRID_ROWS = """(grid) => [...grid.querySelectorAll('[role=row]')].map(
  row => [...row.querySelectorAll('[role=columnheader], [role=gridcell]')].map(cell => cell.textContent))"""


def test_leaderboard_columns_and_kernel_link(server, page, synthetic_archive, tmp_path):
    open_page(page, server + "/leaderboard?level=1", "Leaderboard")
    best = synthetic_archive.best_per_task(Filters(level=("1",)))
    first = best.iloc[0]
    grid = page.locator('[data-testid="stDataFrame"]').first
    page.wait_for_function(f"(grid) => ({GRID_ROWS})(grid).length > 1", arg=grid.element_handle(), timeout=WAIT_MS)
    header, top = grid.evaluate(GRID_ROWS)[:2]
    assert header[: len(LEADERBOARD_COLUMNS)] == LEADERBOARD_COLUMNS
    assert not {"task_id", "kernel_id", "kernel_name"} & set(header)  # the ids live in the link columns only
    task_link, kernel_link = top[0], top[1]
    # the Task column shows "1/7 · layernorm" (the grid decodes the fragment it displays)
    assert task_link == f"task?id={first['task_id']}#" + quote(f"{first['task_id']} · {first['op_name']}", safe="")
    assert kernel_link == f"kernel?id={first['kernel_id']}#{first['kernel_name']}"  # shown as the kernel's name
    assert page.locator('[data-testid="stMain"] [data-testid="stPageLink-NavLink"]').count() == 0  # one way only
    open_page(page, f"{server}/{kernel_link}", first["kernel_name"])  # where the link leads
    assert page.locator('[data-testid="stCode"]').first.inner_text().strip() != ""
    page.screenshot(path=str(tmp_path / "kernel_from_leaderboard.png"), full_page=True)


def test_overview_top_kernel_link_opens_its_kernel_page(server, page, synthetic_archive):
    open_page(page, server + "/", "Verified kernel archive", charts=5)
    top = synthetic_archive.overview().top.iloc[0]
    link = page.locator('[data-testid="stMarkdownContainer"] table a[href^="kernel?id="]').first
    assert link.get_attribute("href") == f"kernel?id={top['kernel_id']}"
    with page.expect_popup() as popup:  # Streamlit opens Markdown links in a new tab
        link.click()
    kernel_page = popup.value
    kernel_page.wait_for_url(f"**/kernel?id={top['kernel_id']}", timeout=WAIT_MS)
    open_page(kernel_page, kernel_page.url, top["kernel_name"])


def test_map_canvas_is_not_blank(server, page, tmp_path):
    import numpy as np
    from PIL import Image

    open_page(page, server + "/map?colour=status", "Map of the archive")
    chart = page.locator('[data-testid="stPlotlyChart"]').first
    chart.locator("canvas").first.wait_for(timeout=WAIT_MS)
    page.wait_for_timeout(1500)  # WebGL draws on the next animation frames
    # A page screenshot clipped to the chart: an element screenshot waits for "stable", flaky on a busy box.
    png = page.screenshot(path=str(tmp_path / "map_chart.png"), clip=chart.bounding_box(), timeout=WAIT_MS)
    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.int16)
    # Points are saturated colours; the background, grid, axes and labels are white, grey or black.
    coloured = int(((pixels.max(axis=2) - pixels.min(axis=2)) > 60).sum())
    assert coloured > 1000, f"only {coloured} coloured pixels: the WebGL scatter did not draw"


def test_map_shows_cluster_labels_in_the_kernel_vocabulary(server, page, synthetic_archive):
    from builder.embed.label_terms import vocabulary_words
    from builder.embed.labels import label_phrases

    open_page(page, server + "/map", "Map of the archive", charts=1)
    chart = page.locator('[data-testid="stPlotlyChart"]').first
    svg_texts = "(nodes) => nodes.map(n => n.textContent)"  # SVG text has no innerText
    shown = chart.locator(".annotation-text").evaluate_all(svg_texts)
    assert sorted(shown) == sorted(synthetic_archive.cluster_centres()["label"])
    assert all(set(label_phrases(label)) <= vocabulary_words() for label in shown), shown
    # The legend names the same clusters.
    assert sorted(chart.locator(".legendtext").evaluate_all(svg_texts)) == sorted(shown)


def test_map_lasso_lists_kernels(server, page, synthetic_archive, tmp_path):
    open_page(page, server + "/map", "Map of the archive")
    chart = page.locator('[data-testid="stPlotlyChart"]').first
    chart.locator("canvas").first.wait_for(timeout=WAIT_MS)
    plot = chart.locator(".nsewdrag").first  # plotly's drag layer over the plotting area
    box = plot.bounding_box()
    x0, y0, x1, y1 = box["x"] + 5, box["y"] + 5, box["x"] + box["width"] - 5, box["y"] + box["height"] - 5
    page.mouse.move(x0, y0)
    page.mouse.down()
    for x, y in ((x1, y0), (x1, y1), (x0, y1), (x0, y0 + 10)):  # lasso around the whole plot
        page.mouse.move(x, y, steps=8)
    page.mouse.up()
    heading = page.get_by_role("heading").filter(has_text="Selected kernels")
    heading.first.wait_for(timeout=WAIT_MS)
    # The lasso encloses the whole plot: the region query lists every kernel that has a map point.
    assert f"Selected kernels ({synthetic_archive.map_total():,})" in heading.first.inner_text()
    page.locator('[data-testid="stMain"] [data-testid="stDataFrame"]').first.wait_for(timeout=WAIT_MS)
    page.screenshot(path=str(tmp_path / "map_selection.png"), full_page=True)


def test_a_shared_link_as_a_fresh_servers_first_request_gets_the_apps_navigation(synthetic_dir, page):
    # Nothing has run the entry script on this server yet: the link must still run it (navigation with page
    # titles, wide layout), not the page script alone as a Streamlit "v1" page named after its file.
    with _serving(synthetic_dir) as url:
        open_page(page, f"{url}/map?colour=status", "Map of the archive", charts=1)
        nav = page.locator('[data-testid="stSidebarNav"]').inner_text(timeout=WAIT_MS).split()
        titles = [word for word in nav if word[0].isupper()]  # the rest are icon names (a ligature font)
        assert titles == ["Overview", "Leaderboard", "Task", "Kernel", "Map", "Search", "Compare"]
        assert "app" not in nav
        assert page.locator('[data-testid="stMain"] [data-testid="stMainBlockContainer"]').bounding_box()["width"] > 900


# --- what a reader must be able to trust: search, totals, text, filters, task names, the kernel page ---

LINK = "[open the new archive](https://evil.example/login)"


def test_a_multi_word_search_finds_kernels_and_states_their_true_total(server, page, synthetic_archive):
    query = "warp shuffle softmax"
    expected = synthetic_archive.search_text(query)
    assert 0 < len(expected) < config.EXPLORER_TABLE_ROWS
    open_page(page, f"{server}/search?q={query}", "Search")
    page.get_by_role("heading").filter(has_text=f"{len(expected):,} kernels found").first.wait_for(timeout=WAIT_MS)
    grid = page.locator('[data-testid="stDataFrame"]').first
    page.wait_for_function(f"(grid) => ({GRID_ROWS})(grid).length > 1", arg=grid.element_handle(), timeout=WAIT_MS)
    kernel_links = [row[1] for row in grid.evaluate(GRID_ROWS)[1:]]
    assert kernel_links[0].startswith(f"kernel?id={expected['kernel_id'].iloc[0]}#")

    everything = synthetic_archive.search_text("kernel")
    assert len(everything) > config.EXPLORER_TABLE_ROWS  # more matches than one page holds
    open_page(page, f"{server}/search?q=kernel", "Search")
    page.get_by_role("heading").filter(has_text=f"{len(everything):,} kernels found").first.wait_for(timeout=WAIT_MS)
    rows = config.EXPLORER_TABLE_ROWS
    page.get_by_text(f"Kernels 1–{rows:,} of {len(everything):,}").first.wait_for(timeout=WAIT_MS)
    assert page.get_by_text(f"Download CSV (all {len(everything):,} rows)").count() == 1


def test_markdown_in_every_url_parameter_is_shown_as_text(server, page, tmp_path):
    for path, params in (
        ("kernel", ["id"]),
        ("task", ["id"]),
        ("compare", ["a", "b"]),
        ("leaderboard", ["min_speedup"]),
        ("leaderboard", ["task", "status", "level", "sort", "order", "baseline"]),
        ("map", ["colour", "points", "category"]),
        ("search", ["q", "mode", "tag"]),
    ):
        query = "&".join(f"{name}={quote(LINK)}" for name in params)
        page.goto(f"{server}/{path}?{query}")
        # a heading, or the message of a page that stops (an unknown kernel has no title)
        page.locator('[data-testid="stMain"] h1, [data-testid="stMain"] [data-testid="stAlert"]').first.wait_for(
            timeout=WAIT_MS
        )
        page.wait_for_function(PAGE_DRAWN, arg=0, timeout=WAIT_MS)
        links = page.locator('a[href*="evil.example"]').evaluate_all("(nodes) => nodes.map(n => n.outerHTML)")
        assert not links, f"a link to evil.example on /{path}: {links}"
        if path != "search":  # elsewhere the page names the value it could not use, as the characters typed
            page.get_by_text(LINK, exact=False).first.wait_for(timeout=WAIT_MS)
        page.screenshot(path=str(tmp_path / f"link_{path}_{params[0]}.png"))


def test_an_unknown_filter_value_is_named_and_the_other_filters_stay(server, page, synthetic_archive):
    open_page(page, f"{server}/leaderboard?task=zzz&level=2&min_speedup=nan", "Leaderboard")
    warning = page.locator('[data-testid="stAlert"]').filter(has_text="not understood").first
    warning.wait_for(timeout=WAIT_MS)
    assert "'zzz'" in warning.inner_text() and "'nan'" in warning.inner_text()
    tasks = len(synthetic_archive.best_per_task(Filters(level=("2",))))
    assert tasks < len(synthetic_archive.best_per_task())
    page.get_by_role("heading").filter(has_text=f"({tasks} tasks)").first.wait_for(timeout=WAIT_MS)
    assert "level=2" in page.url


def test_tasks_are_listed_with_their_names_in_numeric_order(server, page, synthetic_archive):
    open_page(page, f"{server}/leaderboard", "Leaderboard")
    names = synthetic_archive.task_names()
    task_filter = page.locator('[data-testid="stSidebar"] [data-testid="stMultiSelect"]').filter(has_text="Task")
    task_filter.locator("input").first.click()
    options = page.get_by_role("option")
    options.first.wait_for(timeout=WAIT_MS)
    shown = [text for text in options.all_inner_texts() if " · " in text][:5]  # not the "Select all" entry
    assert shown == [f"{t} · {n}" for t, n in list(names.items())[:5]]
    assert shown[1].startswith("1/2 · ")  # numeric order: 1/2 before 1/10
    task_filter.locator("input").first.fill("softmax")
    page.wait_for_timeout(300)
    found = [text for text in options.all_inner_texts() if " · " in text]
    assert found and all("softmax" in text for text in found)


def test_the_compile_errors_message_is_visible_without_scrolling(server, browser, synthetic_archive, tmp_path):
    kernels = synthetic_archive.kernels(limit=None, columns=("kernel_id", "status"))
    broken = kernels[kernels["status"] == "compile_error"]["kernel_id"].iloc[0]
    context = browser.new_context(viewport={"width": 1024, "height": 768})
    tab = context.new_page()
    try:
        open_page(tab, f"{server}/kernel?id={broken}", synthetic_archive.kernel(broken)["kernel_name"])
        message = tab.get_by_text('kernel.cu(14): error: identifier "TILE_K" is undefined', exact=True).first
        message.wait_for(timeout=WAIT_MS)
        box = message.bounding_box()
        assert tab.evaluate("window.scrollY") == 0
        assert box["y"] >= 0 and box["y"] + box["height"] <= 768 and box["x"] + box["width"] <= 1024, box
        tab.screenshot(path=str(tmp_path / "kernel_compile_error.png"))
    finally:
        context.close()


def test_the_kernel_page_states_gpu_dtype_shapes_and_spread_beside_the_speedup(server, page, synthetic_archive):
    best = synthetic_archive.best_per_task().iloc[0]
    open_page(page, f"{server}/kernel?id={best['kernel_id']}", best["kernel_name"])
    speedup = page.locator('[data-testid="stMetric"]').filter(has_text="Speedup vs eager").first
    context = page.get_by_text("measured on NVIDIA H100").first
    context.wait_for(timeout=WAIT_MS)
    text = context.inner_text()
    assert "dtype float32" in text and "inputs 4096×4096" in text and "speedup spread (IQR)" in text
    below = context.bounding_box()["y"] - (speedup.bounding_box()["y"] + speedup.bounding_box()["height"])
    assert 0 <= below < 80  # right under the speedups, not in a tab


def test_nothing_is_fetched_from_another_host(server, page):
    hosts = set()
    page.on("request", lambda request: hosts.add(urlparse(request.url).hostname))
    open_page(page, server + "/", "Verified kernel archive", charts=5)
    open_page(page, server + "/leaderboard", "Leaderboard")
    page.wait_for_timeout(500)  # the favicon is asked for after the page
    assert hosts <= {"127.0.0.1"}, hosts
