"""Every page under streamlit.testing.v1.AppTest with seeded URL query params."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from builder import config
from explorer.components.context import _warm_up as real_warm_up
from explorer.query import Archive
from explorer.sources import resolve_source
from tests.explorer.archive_factory import make_record, write_archive

APP = Path(__file__).resolve().parents[2] / "explorer" / "app.py"
TIMEOUT = 60  # generous for a loaded 2-core CI box; the runs take well under a second


_SESSION: dict[str, AppTest] = {}


def run_page(page: str, **params) -> AppTest:
    """Open `page` with `params` as its URL query, in one app session per source (like a user following links).

    Sessions are reused because each new AppTest scans every installed package for components (~1 s).
    """
    source = os.environ[config.EXPLORER_SOURCE_ENV]
    app = _SESSION.get(source)
    if app is None:
        app = _SESSION[source] = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    app.query_params.clear()
    app.query_params.update(params)
    # url paths equal the file stems, so a page resolves even before the session's first run
    app.switch_page(f"app_pages/{page}.py")
    app.run()
    assert not app.exception, [e.value for e in app.exception]
    return app


def table(app: AppTest, column: str):
    """The first table with this column (AppTest does not expose st.dataframe keys)."""
    frames = [df.value for df in app.dataframe]
    matches = [frame for frame in frames if column in frame.columns]
    assert matches, f"no table with column {column!r} among {[list(f.columns) for f in frames]}"
    return matches[0]


CODE_SPAN = re.compile(r"(?<!\\)(`+)( ?)(.*?)\2\1(?!`)")


def shown(element) -> str:
    """The text a reader sees in a Markdown element: archive and URL text arrive with Markdown escaped and
    URL-like words in code spans."""
    text, out, end = element.value, [], 0
    for match in CODE_SPAN.finditer(text):
        out += [re.sub(r"\\(.)", r"\1", text[end : match.start()]), match.group(3)]
        end = match.end()
    return "".join([*out, re.sub(r"\\(.)", r"\1", text[end:])])


def code_text(app: AppTest) -> str:
    return "\n".join(block.value for block in app.code)


@pytest.fixture(autouse=True)
def no_background_warm_up(monkeypatch):
    """The warm-up thread would load real models for test archives that name one; tested directly below."""
    from explorer.components import context

    monkeypatch.setattr(context, "_warm_up", lambda archive: None)


def test_warm_up_loads_embeddings(synthetic_dir, monkeypatch):
    monkeypatch.setattr(config, "EXPLORER_WARM_UP_DELAY_S", 0.0)
    archive = Archive(resolve_source(str(synthetic_dir)))
    assert archive._embeddings is None
    real_warm_up(archive)
    ids, matrix = archive._embeddings
    assert matrix.shape == (archive.size, 384)
    assert archive._code_loaded  # the full-text word index too


@pytest.fixture
def synthetic(source_env, synthetic_dir, synthetic_archive):
    source_env(synthetic_dir)
    return synthetic_archive


def test_overview(synthetic):
    app = run_page("overview")
    assert app.title[0].value == "Verified kernel archive"
    assert [m.label for m in app.metric][:3] == ["Kernels", "Tasks", "Correct"]
    assert app.metric[0].value == f"{synthetic.size:,}"
    assert len(app.get("vega_lite_chart")) == 5  # two count bars, two histograms, the fast_p curve
    assert not app.get("plotly_chart")  # Plotly (slow to load) is for the map alone
    # Top kernels: a Markdown table (no grid to load on the first page) linking each kernel, best first.
    top_table = [m.value for m in app.markdown if m.value.startswith("| Task | Kernel |")]
    assert len(top_table) == 1
    linked = re.findall(r"\]\(kernel\?id=([^)]+)\)", top_table[0])
    assert linked == list(synthetic.overview().top["kernel_id"]) and len(linked) == 20
    assert any("Synthetic archive" in w.value for w in app.warning), [w.value for w in app.warning]


def test_leaderboard_filters_from_url_change_results(synthetic):
    level1 = table(run_page("leaderboard", level="1"), "n_eligible")
    level2 = table(run_page("leaderboard", level="2", sort="task_id", order="asc"), "n_eligible")
    assert len(level1) and set(level1["task_id"].str[0]) == {"1"}
    assert len(level2) and set(level2["task_id"].str[0]) == {"2"}
    assert list(level2["task_id"]) == sorted(level2["task_id"])
    speedups = list(level1["speedup_eager"])
    assert speedups == sorted(speedups, reverse=True)
    by_model = table(run_page("leaderboard", model="gpt-5-mini"), "fast_1")
    assert set(by_model["model"]) == {"gpt-5-mini"}


def test_leaderboard_widgets_write_the_url_and_offer_csv(synthetic):
    app = run_page("leaderboard")
    assert len(app.download_button) == 2
    app.multiselect(key="leaderboard_filter_status").set_value(["correct"])
    app.selectbox(key="leaderboard_sort").set_value("runtime_ms")
    app.run()
    assert app.query_params["status"] == "correct" and app.query_params["sort"] == "runtime_ms"
    app.number_input(key="leaderboard_filter_min_speedup").set_value(2.0).run()
    assert app.query_params["min_speedup"] == "2"
    assert (table(app, "n_eligible")["speedup_eager"] >= 2.0).all()


def test_bad_url_filter_is_a_warning(synthetic):
    app = run_page("leaderboard", min_speedup="fast")
    assert any("min_speedup must be a finite number" in shown(w) and "'fast'" in shown(w) for w in app.warning)


def test_task_page(synthetic):
    app = run_page("task", id="1/1")
    assert app.title[0].value.startswith("Task 1/1")
    assert set(table(app, "task_id")["task_id"]) == {"1/1"}
    assert "def module_fn" in code_text(app)
    assert len(app.get("vega_lite_chart")) == 2  # verdicts, runtime vs speedup
    assert "No task" in run_page("task", id="99/1").error[0].value
    assert len(run_page("task").selectbox) >= 1  # no id: a picker


def test_kernel_page_shows_code_verdict_flags_profiles(synthetic):
    flagged = synthetic.kernels(eligible_only=False, limit=None, columns=("kernel_id", "flags", "status"))
    flagged = flagged[flagged["flags"].map(len) > 0].iloc[0]
    record = synthetic.kernel(flagged["kernel_id"])
    app = run_page("kernel", id=record["kernel_id"])
    assert shown(app.title[0]) == record["kernel_name"]
    assert record["cuda_code"] in code_text(app)
    flags = table(app, "meaning")
    assert list(flags["flag"]) == list(record["flags"]) and flags["meaning"].str.len().min() > 10
    assert len(app.download_button) == 2
    if record["status"] == "correct":
        assert len(table(app, "occupancy_pct")) == 1  # the NCU per-kernel table
    assert len(table(app, "check"))
    assert len(table(app, "similarity")) == config.EXPLORER_NEIGHBOURS


def test_kernel_page_unknown_or_missing_id(synthetic):
    assert "No kernel" in run_page("kernel", id="nope").error[0].value
    assert run_page("kernel").info


def test_map_page(synthetic):
    app = run_page("map", colour="speedup")
    assert len(app.get("plotly_chart")) == 1
    assert app.selectbox(key="map_colour").value == "speedup"
    assert run_page("map", colour="status", level="2").get("plotly_chart")


def test_map_page_draws_a_sample_of_a_large_archive(synthetic, monkeypatch):
    total = synthetic.map_total()
    monkeypatch.setattr(config, "EXPLORER_MAP_MAX_POINTS", 100)
    monkeypatch.setattr(config, "EXPLORER_MAP_MIN_PER_GROUP", 1)
    sampled = run_page("map")
    drawn = len(synthetic.map_points("cluster_label", limit=100))
    assert drawn < total
    assert any(c.value.startswith(f"{drawn:,} of {total:,} kernels drawn") for c in sampled.caption)
    everything = run_page("map", points="all")
    assert everything.selectbox(key="map_points").value == "all"
    assert any(c.value.startswith(f"{total:,} kernels.") for c in everything.caption)


def test_search_text_and_semantic(synthetic):
    text = table(run_page("search", q="__shfl_down_sync"), "kernel_name")
    assert len(text) and text["kernel_name"].str.contains("_warp_").all()  # only the warp family uses shuffles
    semantic = table(run_page("search", q="warp shuffle reduce __shfl_down_sync", mode="semantic"), "kernel_name")
    assert semantic["kernel_name"].head(5).str.contains("_warp_").all()
    filtered = table(run_page("search", q="__shfl_down_sync", level="3"), "kernel_name")
    assert set(filtered["task_id"].str[0]) == {"3"}


def test_semantic_search_falls_back_when_model_unavailable(tmp_path, source_env, monkeypatch):
    from explorer import embedder

    def unavailable(name):
        raise RuntimeError(f"{name} is not installed")

    # Loading a real sentence-transformers model takes seconds; the page logic is what is tested here.
    monkeypatch.setattr(embedder, "_load", unavailable)
    records = [make_record("1/1", "a", embedding=[1.0, 0.0], embedding_model="no-such-model/for-tests")]
    source_env(write_archive(tmp_path, records))
    app = run_page("search", q="kernel", mode="semantic")
    assert any("Semantic search unavailable" in i.value for i in app.info)
    assert list(table(app, "kernel_name")["kernel_name"]) == ["a"]


def test_compare_page(synthetic):
    best = synthetic.best_per_task()
    a, b = best["kernel_id"].iloc[0], best["kernel_id"].iloc[1]
    app = run_page("compare", a=a, b=b)
    assert "--- a/" in code_text(app) and "+++ b/" in code_text(app)
    metrics = table(app, "metric").set_index("metric")
    assert metrics.loc["task_id", "A"] == best["task_id"].iloc[0]
    assert "No such kernel" in run_page("compare", a=a, b="missing").error[0].value


def test_bad_source_is_a_message_in_the_app(tmp_path, source_env):
    source_env(tmp_path / "nowhere")
    app = AppTest.from_file(str(APP), default_timeout=TIMEOUT).run()
    assert not app.exception
    assert "does not exist" in app.error[0].value


def test_source_env_name_is_shared_with_the_cli():
    from builder.cli import explore

    assert config.EXPLORER_SOURCE_ENV == "KA_EXPLORER_SOURCE" and explore.APP_PATH == APP


def test_public_archive_source_pages(tmp_path, source_env):
    from tests.explorer.archive_factory import sakana_row, write_sakana

    path = write_sakana(
        tmp_path / "public.parquet",
        [sakana_row(1, 1, "fast", True, 0.5, 1.0), sakana_row(1, 2, "bad", False, None, 1.0)],
    )
    source_env(path)
    app = run_page("overview")
    assert any("not re-verified" in shown(w) for w in app.warning)
    best = table(run_page("leaderboard"), "n_eligible")
    assert list(best["kernel_name"]) == ["fast"]
    kernel = run_page("kernel", id=best["kernel_id"].iloc[0])
    assert "__global__ void fast()" in code_text(kernel)
    assert "run `kernel-archive embed`" in run_page("map").info[0].value


def test_files_removed_while_the_app_is_up(tmp_path, source_env):
    import shutil

    folder = write_archive(tmp_path / "gone", [make_record("1/1", "a"), make_record("1/1", "b")])
    source_env(folder)
    assert not run_page("leaderboard").error
    shutil.rmtree(folder / "data")
    kernel_id = make_record("1/1", "b")["kernel_id"]
    errors = [shown(e) for e in run_page("kernel", id=kernel_id).error]
    assert errors and errors[0].startswith("Cannot read the archive:") and str(folder) in errors[0]


def test_leaderboard_leaves_out_what_the_archive_does_not_record(tmp_path, source_env):
    records = [make_record("1/1", "a", speedup_eager=2.0), make_record("1/2", "b", speedup_eager=1.5)]
    source_env(write_archive(tmp_path, records))
    app = run_page("leaderboard")
    assert not [h.value for h in app.subheader if "Per model" in h.value]  # no model or experiment recorded
    assert len(app.download_button) == 1 and not app.error


def _error_text(app: AppTest) -> str:
    assert not app.exception, [e.value for e in app.exception]
    return " ".join(e.value for e in app.error)


def test_corrupt_parquet_and_an_empty_archive_are_messages(tmp_path, source_env):
    import pyarrow.parquet as pq

    from schemas.arrow import kernel_record_schema

    corrupt = tmp_path / "corrupt" / "data"
    corrupt.mkdir(parents=True)
    (corrupt / "level_1-00000-of-00001.parquet").write_bytes(b"PAR1 this is not a parquet file PAR1")
    source_env(corrupt.parent)
    assert "Cannot open the archive" in _error_text(AppTest.from_file(str(APP), default_timeout=TIMEOUT).run())

    empty = tmp_path / "empty" / "data"
    empty.mkdir(parents=True)
    pq.write_table(kernel_record_schema().empty_table(), empty / "level_1-00000-of-00001.parquet")
    source_env(empty.parent)
    assert "holds no kernel records" in _error_text(AppTest.from_file(str(APP), default_timeout=TIMEOUT).run())


def test_a_huge_query_is_answered_not_raised(synthetic):
    for mode in ("text", "semantic"):
        app = run_page("search", q="x" * 10_000, mode=mode)
        assert not app.exception
        assert app.info or app.warning or app.dataframe
