"""Pages under AppTest: totals that are true, URL and archive text shown as text, bad URL values named, tasks
with names, and the kernel page's measurement context and compile error."""

from __future__ import annotations

import pytest

from builder import config
from tests.explorer.archive_factory import make_record, write_archive
from tests.explorer.test_explorer_pages import CODE_SPAN, no_background_warm_up, run_page, shown, table  # noqa: F401

LINK = "[open the new archive](https://evil.example/login)"
MARKDOWN_ELEMENTS = ("title", "header", "subheader", "caption", "markdown", "error", "warning", "info", "success")


def markdown_texts(app) -> list[str]:
    return [element.value for kind in MARKDOWN_ELEMENTS for element in app.get(kind)]


@pytest.fixture
def synthetic(source_env, synthetic_dir, synthetic_archive):
    source_env(synthetic_dir)
    return synthetic_archive


@pytest.mark.parametrize(
    "page, params",
    [
        ("kernel", {"id": LINK}),
        ("task", {"id": LINK}),
        ("compare", {"a": LINK, "b": LINK}),
        ("leaderboard", {"min_speedup": LINK}),
        ("leaderboard", {"task": LINK, "status": LINK, "level": LINK, "sort": LINK, "order": LINK}),
        ("search", {"q": LINK, "mode": LINK, "model": LINK}),
        ("map", {"colour": LINK, "points": LINK, "tag": LINK}),
    ],
)
def test_markdown_in_any_url_parameter_is_shown_as_text(synthetic, page, params):
    app = run_page(page, **params)
    texts = markdown_texts(app)
    # Escaped, the link is no link, and the URL-like word sits in a code span (no bare-URL link either): the
    # page shows the characters typed.
    outside = [CODE_SPAN.sub("", t) for t in texts]
    assert not [t for t in outside if "](" in t.replace("\\]\\(", "") or "https://evil" in t], texts
    if page != "search":  # the query stays in its text box; everything else names the value it did not use
        assert any(LINK in shown(element) for kind in ("error", "warning") for element in app.get(kind)), texts


def test_archive_text_in_titles_is_text(tmp_path, source_env):
    record = make_record("1/1", "**bold** [x](https://evil.example)", op_name="op [y](https://evil.example)")
    source_env(write_archive(tmp_path, [record]))
    kernel = run_page("kernel", id=record["kernel_id"])
    assert shown(kernel.title[0]) == record["kernel_name"] and "](" not in CODE_SPAN.sub("", kernel.title[0].value)
    task = run_page("task", id="1/1")
    assert "](" not in CODE_SPAN.sub("", task.title[0].value) and shown(task.title[0]).endswith(record["op_name"])


def test_unknown_filter_values_are_named_and_the_rest_still_apply(synthetic):
    app = run_page("leaderboard", task="zzz", level=["2", "99999"], status="<script>", min_speedup="nan")
    warning = " ".join(shown(w) for w in app.warning)
    for named in ("'zzz'", "'99999'", "'<script>'", "'nan'"):
        assert named in warning, warning
    best = table(app, "n_eligible")
    assert len(best) and set(best["task_id"].str[0]) == {"2"}  # level=2 still applies
    assert app.query_params["level"] == "2"
    bad_sort = run_page("leaderboard", sort="bogus", level="1")
    assert any("'bogus'" in shown(w) for w in bad_sort.warning)
    assert set(table(bad_sort, "n_eligible")["task_id"].str[0]) == {"1"}


def test_tasks_read_as_number_and_name_in_numeric_order(synthetic):
    app = run_page("leaderboard")
    options = app.multiselect(key="leaderboard_filter_task").options
    names = synthetic.task_names()
    assert options == [f"{t} · {n}" for t, n in names.items()]
    level1 = [int(o.split(" · ")[0].split("/")[1]) for o in options if o.startswith("1/")]
    assert level1 == sorted(level1) and len(level1) > 9  # 1/2 before 1/10
    softmax = [o for o in options if "softmax" in o]
    assert softmax  # typing a task's name finds it


def test_search_finds_every_word_and_states_the_true_total(synthetic, monkeypatch):
    monkeypatch.setattr(config, "EXPLORER_TABLE_ROWS", 20)
    app = run_page("search", q="warp shuffle softmax")
    results = table(app, "kernel_name")
    expected = synthetic.search_text("warp shuffle softmax")
    assert len(expected) and list(results["kernel_id"]) == list(expected["kernel_id"][:20])
    everything = synthetic.search_text("kernel")
    assert len(everything) > 20
    app = run_page("search", q="kernel")
    assert app.subheader[0].value == f"{len(everything):,} kernels found"
    assert any(c.value.startswith(f"Kernels 1–20 of {len(everything):,}") for c in app.caption)
    app.number_input(key="search_results_page").set_value(2).run()
    assert list(table(app, "kernel_name")["kernel_id"]) == list(everything["kernel_id"][20:40])
    assert app.download_button[0].label == f"Download CSV (all {len(everything):,} rows)"


def test_task_page_pages_through_every_kernel(synthetic, monkeypatch):
    monkeypatch.setattr(config, "EXPLORER_TABLE_ROWS", 3)
    total = len(synthetic.task_kernels("1/1"))
    app = run_page("task", id="1/1")
    assert len(table(app, "kernel_name")) == 3 and total > 3
    assert any(c.value.startswith(f"Kernels 1–3 of {total:,}") for c in app.caption)


def test_kernel_page_shows_measurement_context_and_the_compilers_message_first(synthetic):
    kernels = synthetic.kernels(limit=None, columns=("kernel_id", "status", "speedup_eager"))
    broken = kernels[kernels["status"] == "compile_error"]["kernel_id"].iloc[0]
    app = run_page("kernel", id=broken)
    assert shown(app.error[1]) == 'kernel.cu(14): error: identifier "TILE_K" is undefined'  # right below the verdict
    assert "/opt/ka-cache" not in "\n".join(c.value for c in app.code)
    timed = kernels[kernels["speedup_eager"].notna()]["kernel_id"].iloc[0]
    record = synthetic.kernel(timed)
    app = run_page("kernel", id=timed)
    assert [m.label for m in app.metric][:2] == ["Speedup vs eager", "Speedup vs torch.compile"]
    context = " ".join(shown(c) for c in app.caption)
    for fact in (record["gpu_name"], "dtype float32", "inputs 4096×4096", "speedup spread (IQR)"):
        assert fact in context, context
    assert " on cuda" not in context


def test_floor_and_speed_of_light_on_the_kernel_page_and_leaderboard(tmp_path, source_env):
    import pyarrow as pa
    import pyarrow.parquet as pq

    record = make_record("1/1", "a", runtime_ms=2.0, eager_ms=4.0)
    folder = write_archive(tmp_path, [record])
    path = next((folder / "data").glob("*.parquet"))
    table_ = pq.read_table(path)
    for name, value in (("floor_ms", 0.5), ("speed_of_light", 0.25)):
        if name in table_.column_names:
            table_ = table_.set_column(table_.column_names.index(name), name, pa.array([value]))
        else:
            table_ = table_.append_column(name, pa.array([value]))
    pq.write_table(table_, path)
    source_env(folder)
    kernel = run_page("kernel", id=record["kernel_id"])
    metrics = {m.label: m.value for m in kernel.metric}
    assert metrics["Speed of light"] == "25.0%" and metrics["Floor (ms)"] == "0.5000"
    best = table(run_page("leaderboard", sort="speed_of_light"), "n_eligible")
    assert best["speed_of_light"].tolist() == [0.25]


def test_overview_without_several_models_shows_no_model_count(tmp_path, source_env):
    source_env(write_archive(tmp_path, [make_record("1/1", "a", model="m1"), make_record("1/2", "b", model="m1")]))
    app = run_page("overview")
    assert "Models" not in [m.label for m in app.metric]
    assert any("one model: m1" in shown(c) for c in app.caption)
