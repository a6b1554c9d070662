"""Our own archive round-trips, through the real verify engine on the CPU backend: the shared CPU build
(`e2e`, conftest.py) is exported, imported back through each config (`default`, `sakana`) by
`kernel-archive build --generator import`, and re-verified: the same task ids, kernel ids and verdicts.
Then `kernel-archive reverify` on the export reports the verdicts agreeing.

Compiles are served from the build's content-addressed compile cache (same KA_CACHE_DIR), so each import
only evaluates the two kernels again.
"""

from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
import pytest
from pipeline_helpers import run_cli

from builder import config
from builder.pipeline.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def stored_verdicts(build) -> dict[tuple[str, str], str]:
    with Store.open_existing(build) as store:
        rows = store.con.execute("SELECT task_id, kernel_id, status FROM records").fetchall()
    return {(task_id, kernel_id): status for task_id, kernel_id, status in rows}


@pytest.fixture(scope="module")
def export(e2e):
    out = e2e["root"] / "roundtrip-export"
    done = run_cli("export", e2e["build"], "--out", out, env=e2e["env"])
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.parametrize("config_folder", ["data", "sakana"])
def test_export_imports_back_with_the_same_ids_and_verdicts(e2e, export, config_folder):
    original = stored_verdicts(e2e["build"])
    assert sorted(original.values()) == ["correct", "incorrect"]
    out = e2e["root"] / f"reimported-{config_folder}"
    source = export / config_folder
    args = ["build", "--backend", "cpu", "--generator", "import", "--source", source, "--quiet", "--out", out]
    done = run_cli(*args, env=e2e["env"], timeout=800)
    assert done.returncode == 0, done.stderr
    assert "note:" not in done.stderr  # nothing was left out
    assert stored_verdicts(out) == original
    with Store.open_existing(out) as store:
        generators = {row[0] for row in store.con.execute("SELECT DISTINCT generator FROM records").fetchall()}
    assert generators == {"import"}


def test_sakana_rows_carry_the_whole_task_program(export):
    rows = pq.read_table(export / "sakana").to_pylist()
    for row in rows:
        program = row["PyTorch_Code_Functional"]
        for definition in ("def module_fn", "class Model", "fn=module_fn", "def get_inputs", "def get_init_inputs"):
            assert definition in program


def test_reverify_command_reports_the_archive_held_its_verdicts(e2e, export):
    """The build's pass of the control kernel forgotten: the control leads the re-verification's stream."""
    out = e2e["root"] / "reverify-report"
    markers = e2e["root"] / "cache" / config.PREFLIGHT_CACHE_SUBDIR
    shutil.rmtree(markers, ignore_errors=True)
    done = run_cli("reverify", export, "--backend", "cpu", "--out", out, "--quiet", env=e2e["env"], timeout=800)
    assert done.returncode == 0, done.stderr
    assert len(list(markers.glob("*.json"))) == 1  # the control passed, in the stream, and was remembered
    assert "2 kernel(s) re-verified on cpu" in done.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["verdicts"]["confusion"] == {"correct": {"correct": 1}, "incorrect": {"incorrect": 1}}
    assert report["verdicts"]["agreement"] == 1.0 and report["flags"]["changed"] == 0
    assert report["speedup"]["compared"] == 1  # CPU timings vary: the ratio is reported, not asserted
    assert (out / "report.md").is_file() and pq.read_table(out / "records.parquet").num_rows == 2
