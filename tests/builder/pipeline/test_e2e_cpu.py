"""End to end through the real verify engine on the CPU backend (no fakes): build -> status -> export ->
load_dataset, SIGKILL mid-build -> rerun with nothing lost or duplicated, and SIGTERM mid-compile -> a prompt
exit that caches and stores nothing made up.

Kept lean for CI: one task, two bundled .cpp candidates (one designed correct, one incorrect), compiled
once (the engine's content-addressed compile cache and the build's baseline cache are reused by the
SIGKILL test, which then only evaluates). The build (`e2e`, conftest.py) is shared with the round-trip tests.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time

import datasets
import pytest
from pipeline_helpers import CLI, run_cli

from builder import config
from builder.pipeline.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_real_build_status_export_and_load_dataset(e2e):
    with Store.open_existing(e2e["build"]) as store:
        rows = store.con.execute(
            "SELECT kernel_name, status, backend, isolation, seeds, stand_in_verifier FROM records ORDER BY kernel_name"
        ).fetchall()
        (run,) = store.builds()
    assert [(name, status) for name, status, *_ in rows] == [("naive", "correct"), ("transposed_b", "incorrect")]
    assert all(backend == "cpu" and isolation for _, _, backend, isolation, *_ in rows)
    assert all(seeds == run["seeds"] for *_, seeds, _ in rows)  # the build's seeds, recorded with each kernel
    assert all(stand_in is None for *_, stand_in in rows)  # the real engine made them: no stand-in's stamp
    # The control kernel (task 1/19, not this build's) led the stream: it passed and is remembered, not stored.
    assert len(list((e2e["root"] / "cache" / config.PREFLIGHT_CACHE_SUBDIR).glob("*.json"))) == 1
    status = run_cli("status", e2e["build"], env=e2e["env"])
    assert status.returncode == 0 and "2 record(s)" in status.stdout
    out = e2e["root"] / "dataset"
    done = run_cli("export", e2e["build"], "--out", out, env=e2e["env"])
    assert done.returncode == 0, done.stderr
    cache = str(e2e["root"] / "hf-cache")
    default = datasets.load_dataset(str(out), cache_dir=cache)
    assert list(default) == ["level_1"] and len(default["level_1"]) == 2
    assert datasets.load_dataset(str(out), "sakana", cache_dir=cache)["level_1"]["Correct"].count(True) == 1
    sft = datasets.load_dataset(str(out), "sft", cache_dir=cache)["train"]
    assert len(sft) == 1 and "torch::Tensor forward" in sft[0]["completion"]
    preference = datasets.load_dataset(str(out), "preference", cache_dir=cache)["train"]
    assert len(preference) == 1 and preference[0]["rejected_status"] == "incorrect"
    planned = run_cli("publish", out, "--repo-id", "org/kernels", "--dry-run", env=e2e["env"])
    assert planned.returncode == 0 and "would go to org/kernels" in planned.stdout, planned.stderr  # no stand-in


def test_real_engine_sigkill_mid_build_then_resume(e2e):
    out = e2e["root"] / "killed"
    out.mkdir()
    if (e2e["build"] / "baselines").is_dir():  # a cache: then only evaluation is left to do
        shutil.copytree(e2e["build"] / "baselines", out / "baselines")
    proc = subprocess.Popen(
        [*CLI, *e2e["args"], "--out", str(out)],
        env=e2e["env"],
        cwd=config.REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 600
    stored = 0
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            stored = json.loads((out / config.BUILD_PROGRESS_NAME).read_text())["stored"]
        except (OSError, ValueError, KeyError):
            stored = 0
        if stored >= 1:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert stored >= 1
    with Store.open_existing(out) as store:
        survived = store.done_keys()
    assert len(survived) >= stored
    done = run_cli(*e2e["args"], "--out", out, env=e2e["env"], timeout=600)
    assert done.returncode == 0, done.stderr
    with Store.open_existing(out) as store:
        total, distinct = store.con.execute("SELECT count(*), count(DISTINCT kernel_id) FROM records").fetchall()[0]
        final = store.done_keys()
    with Store.open_existing(e2e["build"]) as store:
        expected = store.done_keys()
    assert survived <= final == expected and total == distinct == 2


def test_sigterm_mid_compile_stops_at_once_and_leaves_no_made_up_verdict(e2e):
    # A fresh compile cache, so the build is compiling (g++ with torch headers: tens of seconds) when the
    # TERM arrives, as a timeout's or a scheduler's TERM finds a GPU build in nvcc. Before, the interpreter's
    # exit waited for every compile in flight (exit 137 after `timeout -k 30`), and a compile killed at exit
    # could leave a made-up failure in the cache.
    out, cache = e2e["root"] / "termed", e2e["root"] / "cache-termed"
    env = {**e2e["env"], "KA_CACHE_DIR": str(cache)}
    proc = subprocess.Popen(
        [*CLI, *e2e["args"], "--out", str(out)],
        env=env,
        cwd=config.REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None and not list(cache.glob("compile/builds/*/job.json")):
        time.sleep(0.05)  # the compile's job file is written just before its sandboxed child starts
    assert proc.poll() is None, stderr_of(proc)
    time.sleep(2.0)  # the compiler is running
    proc.send_signal(signal.SIGTERM)
    termed = time.monotonic()
    _, stderr = proc.communicate(timeout=60)
    assert time.monotonic() - termed < 15, "the build waited for its compiles before exiting"
    assert proc.returncode == 130, stderr.decode(errors="replace")
    with Store.open_existing(out) as store:
        assert store.done_keys() == set()  # nothing finished compiling, so nothing was stored
        assert store.builds()[-1]["state"] == "interrupted"
    cached_results = list(cache.rglob("result.json"))
    assert cached_results == []  # the killed compile left no verdict behind


def stderr_of(proc: subprocess.Popen) -> str:
    proc.kill()
    return proc.communicate()[1].decode(errors="replace")[-2000:]
