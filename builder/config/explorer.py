"""The explorer's constants (explorer/ and `kernel-archive explore`): serving, the query layer, search, the map."""

from __future__ import annotations

EXPLORER_SOURCE_ENV = "KA_EXPLORER_SOURCE"  # how `kernel-archive explore` hands SOURCE to the Streamlit app
EXPLORER_DEFAULT_PORT = 8501
EXPLORER_DEFAULT_ADDRESS = "127.0.0.1"  # loopback unless --address says otherwise
EXPLORER_TOOLBAR_MODE = "viewer"  # Streamlit client.toolbarMode: no Deploy button or developer menu
EXPLORER_SYNTHETIC_KERNELS = 600  # size of the synthetic archive used until data/sample/ exists
EXPLORER_SYNTHETIC_SEED = 7
EXPLORER_QUERY_CACHE_ENTRIES = 256  # results kept by the query layer (LRU over query + parameters)
EXPLORER_TABLE_ROWS = 200  # rows of a kernel table page; the true total is shown, more pages on demand, CSV has all
EXPLORER_OVERVIEW_TOP_KERNELS = 20  # rows of the overview's "Top kernels" table
EXPLORER_NEIGHBOURS = 8  # nearest neighbours by embedding on the kernel page
EXPLORER_SEARCH_RESULTS = 50  # semantic search: the nearest kernels listed (full-text lists every match)
# Full-text search (explorer/text_query.py): Okapi BM25 over words, a hit in the names (op, task, kernel, tags,
# cluster) worth NAME_WEIGHT hits in the code; stop words left out of a query unless it has nothing else.
EXPLORER_SEARCH_BM25_K1 = 1.2
EXPLORER_SEARCH_BM25_B = 0.75
EXPLORER_SEARCH_NAME_WEIGHT = 3
EXPLORER_SEARCH_MIN_STEM = 3  # a suffix is folded (tiling -> til) only when this many characters are left
EXPLORER_SEARCH_MAX_WORDS = 16  # words (and phrases) of one query used; a 10 000-character query stays cheap
EXPLORER_SEARCH_STOP_WORDS = frozenset(
    "a an and are as at be by for from in into is it of on or that the this to using uses use via with".split()
)
# Columns the explorer shows when an archive has them (read as NULL otherwise), beyond the record schema's.
EXPLORER_OPTIONAL_COLUMNS = {"floor_ms": "DOUBLE", "speed_of_light": "DOUBLE"}
# The map draws at most this many points: software WebGL on a 2-core box spends ~2.3 s on the page and ~25 ms per
# 1,000 points (100k: ~5 s). A larger archive is drawn as a fixed per-colour sample over a grey density image of
# every kernel, with "draw all" one choice away; box/lasso selections list every kernel inside the shape.
EXPLORER_MAP_MAX_POINTS = 10_000
EXPLORER_MAP_DENSITY_BINS = 160  # the density image beneath a sampled map is this many cells a side
EXPLORER_MAP_MIN_PER_GROUP = 200  # a sampled map keeps at least this many points (or all) of every colour value
EXPLORER_MAP_MARKER_SCALE = 40.0  # marker diameter = this / n_points**0.25 px, clipped to the two below
EXPLORER_MAP_MARKER_MIN_PX = 4.0
EXPLORER_MAP_MARKER_MAX_PX = 10.0
EXPLORER_MAP_HEIGHT_PX = 620  # the map's plotting area (the figure adds its margins)
EXPLORER_MAP_LABEL_WIDTH_PX = 700  # cluster labels are kept apart as if the plot were this narrow
EXPLORER_MAP_PAD_FRACTION = 0.04  # the map's axes span the kernels plus this share of their extent on each side
EXPLORER_FAST_P_MAX = 10.0  # the fast_p curve spans p in [0, this]
EXPLORER_FAST_P_POINTS = 101
EXPLORER_OPEN_AFTER_SERVING_MAX_S = 30.0  # `explore` opens the archive once the server serves, or after this
EXPLORER_SERVING_POLL_S = 0.05  # how often that open asks the server's health endpoint
EXPLORER_HEALTH_PATH = "/_stcore/health"  # asked until Streamlit answers (see preload.wait_until_serving)
EXPLORER_WARM_UP_DELAY_S = 3.0  # after opening an archive, wait this long before loading embeddings + query model
EXPLORER_HUB_PATTERNS = ("data/*.parquet", "README.md", "*.parquet")  # what a Hub source downloads
# Headless Chromium for the browser tests and the explorer benchmark, as Chrome runs for a user without a usable
# GPU: software raster, SwiftShader only as the WebGL fallback (not `--use-angle=swiftshader`; docs/explorer.md).
EXPLORER_CHROMIUM = "/usr/bin/chromium"
EXPLORER_CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--enable-unsafe-swiftshader",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
)
