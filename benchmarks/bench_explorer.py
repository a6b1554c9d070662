"""Explorer speed on a 100k-kernel synthetic archive: cold start, filter/sort, semantic search, map render.

Targets (issue 8): app ready < 5 s cold (from `kernel-archive explore` to the overview drawn), filter/sort < 300 ms server time, semantic search < 500 ms,
map page rendered < 3 s in headless Chromium (the default view, which draws at most
EXPLORER_MAP_MAX_POINTS; `points=all` is reported too). Prints measured figures and the machine; exits 0 either way
(figures are reported, not asserted). Usage: python benchmarks/bench_explorer.py [N_KERNELS] [queries|semantic|browser]
(BENCH_COLD_STARTS launches are timed for the cold start, 3 by default; --help builds nothing).
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from builder import config  # noqa: E402
from explorer.filters import Filters  # noqa: E402
from explorer.query import Archive  # noqa: E402
from explorer.sample import write_synthetic_archive  # noqa: E402
from explorer.sources import resolve_source  # noqa: E402

CHROMIUM = config.EXPLORER_CHROMIUM
# BENCH_CHROMIUM_EXTRA_ARGS (space-separated) adds flags, e.g. "--use-gl=angle --use-angle=swiftshader" to compare
# with the earlier benchmark runs, which ran SwiftShader as the GPU for raster and compositing too.
CHROMIUM_ARGS = list(config.EXPLORER_CHROMIUM_ARGS) + os.environ.get("BENCH_CHROMIUM_EXTRA_ARGS", "").split()
COLD_STARTS = int(os.environ.get("BENCH_COLD_STARTS", "3"))  # launches timed from the CLI to the overview drawn


def machine() -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    load = os.getloadavg()
    return (
        f"{os.cpu_count()} cores ({cpu}), {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB, "
        f"load average {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}, Python {platform.python_version()}"
    )


CPU_MS: list[float] = []  # process CPU time of the timed() calls: less distorted than wall time on a busy box


def timed(fn) -> float:
    start, cpu = time.perf_counter(), time.process_time()
    fn()
    CPU_MS.append((time.process_time() - cpu) * 1000)
    return (time.perf_counter() - start) * 1000


def report(name: str, samples_ms: list[float], target_ms: float | None = None) -> None:
    median = statistics.median(samples_ms)
    cpu = statistics.median(CPU_MS) if CPU_MS else float("nan")
    CPU_MS.clear()
    verdict = ""
    if target_ms is not None:
        # Strict: every sample under the target (a median under it is reported as such, not as met).
        if max(samples_ms) < target_ms:
            verdict = "  OK"
        elif median < target_ms:
            verdict = f"  median OK, max OVER target {target_ms:.0f} ms"
        else:
            verdict = f"  OVER target {target_ms:.0f} ms"
    cpu_text = f"  cpu median {cpu:7.1f} ms" if cpu == cpu else ""  # browser timings have no process CPU figure
    print(
        f"{name:<46} wall median {median:8.1f} ms  max {max(samples_ms):8.1f} ms{cpu_text} "
        f"(n={len(samples_ms)}){verdict}"
    )


def archive_dir(n: int) -> Path:
    out = config.CACHE_DIR / f"explorer-bench-{n}"
    if not (out / "README.md").exists():
        start = time.perf_counter()
        write_synthetic_archive(out, n)
        print(f"generated {n:,} synthetic kernels in {time.perf_counter() - start:.1f} s -> {out}")
    return out


def bench_queries(source: Path) -> Archive:
    holder = {}
    report(
        "open archive (in-process, light table)", [timed(lambda: holder.update(a=Archive(resolve_source(str(source)))))]
    )
    archive = holder["a"]
    print(f"  ({archive.size:,} kernels)")
    interactions = [
        lambda: archive.best_per_task(Filters(level=("1",)), sort="speedup_eager"),
        lambda: archive.best_per_task(Filters(model=("gpt-5-mini",), status=("correct",)), sort="runtime_ms"),
        lambda: archive.best_per_task(Filters(flag=("none",), min_speedup=1.5), baseline="compile"),
        lambda: archive.by_model(Filters(category=("matmul", "conv"))),
        lambda: archive.kernels(Filters(tag=("warp_shuffle",)), sort="runtime_ms", descending=False),
        lambda: archive.kernels(Filters(level=("2", "3"), experiment=("synthetic-sweep-a",)), sort="kernel_name"),
        lambda: archive.fast_p_curve("eager", Filters(level=("1",))),
        lambda: archive.map_points("status", Filters(level=("1",))),
        lambda: archive.counts_by("model", "status"),
    ]
    CPU_MS.clear()
    samples = []
    for fn in interactions:
        archive._cache.clear()  # measure the query, not the result cache
        samples.append(timed(fn))
    report("filter/sort interaction (uncached)", samples, 300)
    for fn in interactions:
        fn()
    report("same interaction, cached result", [timed(fn) for fn in interactions], 300)
    ids = list(archive.kernels(limit=5)["kernel_id"])
    report("kernel page record (code + profiles)", [timed(lambda kid=kid: archive.kernel(kid)) for kid in ids])
    archive._cache.clear()
    report("full-text search: first (builds the word index)", [timed(lambda: archive.search_text("tile"))])
    queries = (
        "shared memory tiling matmul",
        "softmax warp reduction",
        "fused conv relu",
        "float4",
        '"__shfl_down_sync"',
        "vectorized relu float4",
    )
    for query in queries:
        print(f"    {query!r}: {len(archive.search_text(query)):,} kernels")
    archive._cache.clear()
    report(
        "full-text search, every match ranked (uncached)",
        [timed(lambda q=q: archive.search_text(q)) for q in queries],
        500,
    )
    report(
        "full-text search with filters (uncached)",
        [timed(lambda q=q: archive.search_text(q, Filters(level=("1",)))) for q in queries],
        500,
    )
    return archive


def bench_semantic(archive: Archive) -> None:
    from explorer.embedder import query_encoder

    start = time.perf_counter()
    encoder, problem = query_encoder(config.EMBEDDING_MODEL_ID)
    if encoder is None:
        print(f"semantic search with the real model skipped: {problem}")
        return
    print(f"{'load query model (once per server)':<48} {1000 * (time.perf_counter() - start):8.1f} ms")
    start = time.perf_counter()
    archive.embeddings()
    print(f"{'load embedding matrix (once per server)':<48} {1000 * (time.perf_counter() - start):8.1f} ms")
    queries = [
        "warp shuffle reduction",
        "shared memory tiled matmul",
        "vectorized float4 relu",
        "tensor core wmma gemm",
        "atomic add partial sums",
        "fused bias activation epilogue",
    ]
    vectors = [encoder(q) for q in queries]
    CPU_MS.clear()
    report("encode query only", [timed(lambda q=q: encoder(q)) for q in queries])
    report("rank 100k + fetch rows only", [timed(lambda v=v: archive.nearest(v)) for v in vectors])
    report("semantic search (encode + rank)", [timed(lambda q=q: archive.nearest(encoder(q))) for q in queries], 500)
    report(
        "semantic search with filters",
        [timed(lambda q=q: archive.nearest(encoder(q), Filters(level=("1",)))) for q in queries],
        500,
    )


def bench_browser(source: Path, n: int) -> None:
    if not Path(CHROMIUM).exists():
        print("browser figures skipped: no /usr/bin/chromium")
        return
    import numpy as np
    from PIL import Image
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # Cold start as a user has it: from `kernel-archive explore SOURCE` (which checks the source, then
        # serves the app in the same process) to the overview drawn, in a browser that never loaded the app.
        # One launch on a shared 2-core VM is a poor sample (0.5 s apart back to back): several, each with a
        # fresh server and a fresh browser; the last pair goes on to the page timings.
        healthy_ms, drawn_ms = [], []
        server = browser = None
        try:
            for launch in range(COLD_STARTS):
                if launch:
                    _stop(server, browser)
                    time.sleep(2)
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                server, url, healthy_s, drawn_s = _cold_start(source, page)
                healthy_ms.append(1000 * healthy_s)
                drawn_ms.append(1000 * drawn_s)
                print(f"    cold start {launch + 1}: server healthy {healthy_s:.2f} s, overview drawn {drawn_s:.2f} s")
            print(f"chromium {browser.version}: {' '.join(CHROMIUM_ARGS)}")
            report("cold start: server healthy", healthy_ms)
            report("cold start: overview rendered in Chromium", drawn_ms, 5000)

            def map_ms(query: str, from_overview: bool = False) -> float:
                if from_overview:  # a user's path: the overview, then the Map link (no reload of the app)
                    page.goto(f"{url}/")
                    _wait_rendered(page, "Verified kernel archive", OVERVIEW_CHARTS)
                    start = time.perf_counter()
                    page.locator('[data-testid="stSidebarNav"] a[href$="/map"]').first.click()
                else:  # a shared link opened in a fresh tab: the whole app loads
                    start = time.perf_counter()
                    page.goto(f"{url}/map?{query}")
                _wait_rendered(page, "Map of the archive", 1)
                phases = {"page": time.perf_counter() - start}
                chart = page.locator('[data-testid="stPlotlyChart"]').first
                chart.wait_for(timeout=120_000)
                # Plotly has drawn its WebGL traces once the plot holds its computed data (cheap to poll, unlike
                # screenshots, which on 2 cores take CPU from the very rendering being timed) ...
                page.wait_for_function(PLOTLY_DRAWN, timeout=120_000, polling=50)
                phases["webgl"] = time.perf_counter() - start
                box = chart.bounding_box()
                while True:  # ... and the points must really be on screen: coloured pixels in the chart
                    png = page.screenshot(clip=box, timeout=120_000)
                    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.int16)
                    if int(((pixels.max(axis=2) - pixels.min(axis=2)) > 60).sum()) > 1000:
                        phases["pixels"] = time.perf_counter() - start
                        print("    map phases (s): " + ", ".join(f"{k} {v:.2f}" for k, v in phases.items()))
                        return (time.perf_counter() - start) * 1000
                    time.sleep(0.1)

            # The server loads the embedding matrix and query model in the background a few seconds after
            # opening (seconds of CPU): page timings below are for a settled server, not ones sharing 2 cores.
            print(f"{'server settled after its warm-up':<48} {1000 * _wait_idle(server.pid):8.1f} ms")
            drawn = min(n, config.EXPLORER_MAP_MAX_POINTS)
            samples = [map_ms(f"colour={colour}") for colour in ("cluster", "status", "speedup", "op+category")]
            report(f"map page opened by URL ({drawn:,} points drawn)", samples, 3000)
            samples = [map_ms("", from_overview=True) for _ in range(3)]
            report(f"map page via the sidebar link ({drawn:,} drawn)", samples, 3000)
            samples = [map_ms(f"colour={colour}&points=all") for colour in ("cluster", "status")]
            report(f"map page opened by URL (points=all: {n:,} drawn)", samples)
            start = time.perf_counter()
            page.goto(f"{url}/leaderboard?level=1&sort=runtime_ms")
            _wait_rendered(page, "Leaderboard")
            print(f"{'leaderboard page rendered (warm server)':<48} {1000 * (time.perf_counter() - start):8.1f} ms")
        finally:
            _stop(server, browser)


def _cold_start(source: Path, page) -> tuple[subprocess.Popen, str, float, float]:
    """Launch `kernel-archive explore` on a free port, open the overview: (server, url, s to healthy, s to drawn)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    start = time.perf_counter()
    server = subprocess.Popen(
        [sys.executable, "-m", "builder", "explore", str(source), "--port", str(port)],
        cwd=config.REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        while True:
            try:
                urllib.request.urlopen(f"{url}{config.EXPLORER_HEALTH_PATH}", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        healthy = time.perf_counter() - start
        page.goto(url + "/")
        _wait_rendered(page, "Verified kernel archive", OVERVIEW_CHARTS)
    except BaseException:
        _stop(server, None)
        raise
    return server, url, healthy, time.perf_counter() - start


def _stop(server: subprocess.Popen | None, browser) -> None:
    if server is not None:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
    if browser is not None:
        browser.close()


def _wait_idle(pid: int, quiet_s: float = 1.0, busy_share: float = 0.05, limit_s: float = 120) -> float:
    """Seconds until process `pid` uses under `busy_share` of a core for `quiet_s` in a row (after the warm-up
    delay it starts with)."""
    tick = os.sysconf("SC_CLK_TCK")

    def cpu_s() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick  # utime + stime

    start = time.perf_counter()
    time.sleep(config.EXPLORER_WARM_UP_DELAY_S)
    while time.perf_counter() - start < limit_s:
        before = cpu_s()
        time.sleep(quiet_s)
        if cpu_s() - before < busy_share * quiet_s:
            break
    return time.perf_counter() - start


OVERVIEW_CHARTS = 5  # counts, counts by model, two speedup histograms, fast_p

PLOTLY_DRAWN = (
    "(() => { const gd = document.querySelector('[data-testid=\"stPlotlyChart\"] .js-plotly-plot');"
    " return !!(gd && gd.calcdata && gd._fullLayout && gd.querySelector('.gl-container canvas')); })()"
)


# A page is drawn when its script run is over, no element still shows the skeleton Streamlit puts where a
# lazily loaded element (chart, dataframe) will go, every chart is drawn (Plotly: its SVG; Vega-Lite: its canvas)
# and every table has its canvas. Without the skeleton check a wait could end before any chart existed.
PAGE_DRAWN = """([heading, charts]) => {
  const q = (s) => [...document.querySelectorAll(s)];
  const plotly = q('[data-testid="stPlotlyChart"]'), vega = q('[data-testid="stVegaLiteChart"]');
  return q('h1').some(h => h.textContent.includes(heading))
    && !document.querySelector('[data-testid="stStatusWidget"]')
    && !document.querySelector('[data-testid="stSkeleton"]')
    && plotly.every(c => c.querySelector('.main-svg')) && vega.every(c => c.querySelector('canvas, svg'))
    && plotly.length + vega.length >= charts
    && q('[data-testid="stDataFrame"]').every(d => d.querySelector('canvas'));
}"""


def _wait_rendered(page, heading: str, charts: int = 0) -> None:
    page.wait_for_function(PAGE_DRAWN, arg=[heading, charts], timeout=120_000, polling=50)


PARTS = ("queries", "semantic", "browser")


def parse_args(argv: list[str]) -> tuple[int, set[str]]:
    """(archive size, parts to time); --help and bad arguments exit here, before anything is generated."""
    parser = argparse.ArgumentParser(
        prog="bench_explorer.py",
        description="Explorer speed on a synthetic archive: cold start and pages in headless Chromium, filter/sort, "
        "full-text and semantic search. The archive is generated once into the cache directory (about 70 s for "
        "100 000 kernels) when a benchmark first needs it; --help builds nothing. Figures are reported, not asserted.",
    )
    parser.add_argument(
        "what",
        nargs="*",
        metavar="[N_KERNELS] [PART ...]",
        help=f"archive size (default 100000), then any of {', '.join(PARTS)} (default: all)",
    )
    words = parser.parse_args(argv).what
    n = 100_000
    if words and words[0].isdigit():
        n = int(words.pop(0))
    unknown = [w for w in words if w not in PARTS]
    if unknown or n < 1:
        parser.error(f"expected N_KERNELS >= 1 then parts among {', '.join(PARTS)}, got {' '.join(argv)!r}")
    return n, set(words) or set(PARTS)


def main() -> None:
    n, parts = parse_args(sys.argv[1:])  # e.g. `bench_explorer.py 100000 browser`
    print(f"== explorer benchmark, {n:,} kernels; machine: {machine()}")
    source = archive_dir(n)
    if parts & {"queries", "semantic"}:
        archive = bench_queries(source)
        if "semantic" in parts:
            bench_semantic(archive)
    if "browser" in parts:
        bench_browser(source, n)
    print(f"== done; machine after the run: {machine()}")


if __name__ == "__main__":
    main()
