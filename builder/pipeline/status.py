"""`kernel-archive status` data: what a build dir holds, how fast it went, what remains."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from builder import config
from builder.errors import ArchiveError, UsageError
from builder.pipeline.store import Store


@dataclass
class BuildStatus:
    total: int
    by_level_status: dict[tuple[int, str], int]
    by_flag: dict[str, int]
    builds: list[dict[str, Any]]
    tasks_without_records: list[str] = field(default_factory=list)
    waiting: list[dict[str, Any]] = field(default_factory=list)  # pairs the machinery failed, latest first
    live: dict[str, Any] | None = None  # progress.json of a running build (database locked)

    def throughput_per_hour(self) -> float | None:
        """Records stored per wall hour, over the finished/interrupted runs that stored any."""
        stored, seconds = 0, 0.0
        for run in self.builds:
            counts = run.get("counts") or {}
            if counts.get("stored") and counts.get("elapsed_s"):
                stored += counts["stored"]
                seconds += counts["elapsed_s"]
        return stored / seconds * 3600 if seconds > 0 else None


def read_status(build_dir: Path) -> BuildStatus:
    build_dir = Path(build_dir)
    try:
        store = Store.open_existing(build_dir, read_only=True)
    except UsageError as exc:
        live = _live_snapshot(build_dir)
        if "in use" in str(exc) and live is not None:
            return BuildStatus(total=live.get("stored", 0), by_level_status={}, by_flag={}, builds=[], live=live)
        raise
    with store:
        con = store.con
        rows = con.execute("SELECT level, status, count(*) FROM records GROUP BY level, status").fetchall()
        flags = con.execute("SELECT f, count(*) FROM (SELECT unnest(flags) AS f FROM records) GROUP BY f").fetchall()
        builds = store.builds()
        stored_tasks = {r[0] for r in con.execute("SELECT DISTINCT task_id FROM records").fetchall()}
        waiting = store.waiting()
    status = BuildStatus(
        total=sum(n for _, _, n in rows),
        by_level_status={(level, s): n for level, s, n in rows},
        by_flag=dict(flags),
        builds=builds,
        waiting=waiting,
    )
    status.tasks_without_records = _tasks_without_records(builds, stored_tasks)
    return status


def _tasks_without_records(builds: list[dict[str, Any]], stored_tasks: set[str]) -> list[str]:
    """Tasks the latest run selected that have no record yet (what a resumed build still has to cover)."""
    if not builds:
        return []
    params = builds[-1].get("parameters") or {}
    try:
        from builder.tasks import load_suite

        tasks = load_suite(params.get("suite")).select(levels=params.get("levels"), pattern=params.get("tasks"))
    except ArchiveError:
        return []  # the suite moved or vanished since: nothing to compare against
    return [t.id for t in tasks if t.id not in stored_tasks]


def _live_snapshot(build_dir: Path) -> dict[str, Any] | None:
    path = build_dir / config.BUILD_PROGRESS_NAME
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def run_duration_s(run: dict[str, Any]) -> float | None:
    try:
        start = datetime.fromisoformat(run["started_at"])
        end = datetime.fromisoformat(run["finished_at"])
    except (KeyError, TypeError, ValueError):
        return None
    return (end - start).total_seconds()
