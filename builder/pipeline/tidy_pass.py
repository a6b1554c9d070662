"""`kernel-archive tidy BUILD_DIR`: fill in clang-tidy for records built where it was not installed.

GPU boxes often lack clang-tidy (the one that built data/sample had none), while clang-tidy only parses
text. So the build records {"error": "clang-tidy not found ..."} and this pass, on any machine with the
`clang-tidy` wheel, reads each such record's stored source, runs clang-tidy (subprocesses of this trusted
process: the candidate is parsed, never compiled or run) and updates the record's `clang_tidy` and
`clang_tidy_warnings`. Each record is committed as it finishes, so a killed pass resumes where it
stopped; re-export the build afterwards to publish the new fields.

A rebuild of an archive mostly re-verifies sources that an earlier export already analysed, and
clang-tidy's result depends only on its input: `reuse_from` takes a result from an exported dataset
where language, source and architecture are the same and the result came from this clang-tidy version
with these checks (the result names both), and analyses the rest.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from builder import config
from builder.errors import UsageError
from builder.pipeline.store import Store
from builder.profile import profile_record_fields
from builder.profile.clang_tidy import (
    CLANG_TIDY_MISSING,
    SUFFIX_BY_LANGUAGE,
    clang_tidy_binary,
    clang_tidy_version,
    normalise_arch,
    run_clang_tidy,
)

# Errors that mean "clang-tidy never looked at this source" (rather than "it looked and failed").
NOT_ANALYSED = (CLANG_TIDY_MISSING, "profiling unavailable", "not profiled")


@dataclass(frozen=True)
class TidyJob:
    task_id: str
    kernel_id: str
    language: str
    source: str
    compute_capability: str | None


@dataclass
class TidySummary:
    pending: int = 0
    updated: int = 0
    reused: int = 0  # of `updated`: taken from an earlier export's identical analysis
    failed: int = 0  # clang-tidy ran but gave {"error": ...} (timeout, could not start): stored as such
    warnings: int = 0
    errors: list[str] = field(default_factory=list)


def never_analysed(clang_tidy_text: str | None) -> bool:
    if not clang_tidy_text:
        return True
    try:
        error = json.loads(clang_tidy_text).get("error")
    except (ValueError, AttributeError):
        return True  # unreadable: analyse again rather than keep garbage
    return isinstance(error, str) and error.startswith(NOT_ANALYSED)


def pending_jobs(store: Store, redo: bool = False) -> list[TidyJob]:
    """Records whose source clang-tidy can read and has not analysed (all of them with `redo`)."""
    rows = store.con.execute(
        "SELECT task_id, kernel_id, language, cuda_code, compute_capability, clang_tidy FROM records "
        "WHERE language IN (SELECT unnest(?)) AND cuda_code IS NOT NULL ORDER BY task_id, kernel_id",
        [list(SUFFIX_BY_LANGUAGE)],
    ).fetchall()
    return [
        TidyJob(task_id, kernel_id, language, source, capability)
        for task_id, kernel_id, language, source, capability, tidy in rows
        if redo or never_analysed(tidy)
    ]


def reuse_key(language: str, source: str, arch: str | None) -> tuple[str, str, str | None]:
    return language, source, normalise_arch(arch) if language == "cuda" else None


def reusable_results(dataset_dir: Path) -> dict[tuple[str, str, str | None], dict]:
    """Analyses in an exported dataset that this clang-tidy, with these checks, would repeat word for word."""
    import pyarrow.dataset as ds

    files = sorted((Path(dataset_dir) / "data").glob("*.parquet"))
    if not files:
        raise UsageError(f"{dataset_dir}: no exported records (data/*.parquet) to reuse clang-tidy results from")
    columns = ["language", "cuda_code", "compute_capability", "clang_tidy", "clang_tidy_warnings"]
    version = clang_tidy_version()
    reusable = {}
    for row in ds.dataset([str(f) for f in files], format="parquet").to_table(columns=columns).to_pylist():
        try:
            result = json.loads(row["clang_tidy"] or "")
        except ValueError:
            continue
        if not isinstance(result, dict) or "error" in result or row["clang_tidy_warnings"] is None:
            continue
        if result.get("version") != version or result.get("checks") != config.CLANG_TIDY_CHECKS:
            continue
        key = reuse_key(row["language"], row["cuda_code"] or "", row["compute_capability"])
        if result.get("arch") == key[2]:
            reusable[key] = {"clang_tidy": row["clang_tidy"], "clang_tidy_warnings": row["clang_tidy_warnings"]}
    return reusable


def tidy_fields(job: TidyJob) -> dict:
    """The record's clang-tidy fields for one job (the same code path the verification engine uses)."""
    result = run_clang_tidy(job.source, job.language, arch=job.compute_capability if job.language == "cuda" else None)
    fields = profile_record_fields(job.source, job.language, backend="none", clang_tidy=result)
    return {"clang_tidy": fields["clang_tidy"], "clang_tidy_warnings": fields["clang_tidy_warnings"]}


def run(
    build_dir: Path,
    workers: int = 2,
    redo: bool = False,
    on_done: Callable[[TidyJob, dict], None] | None = None,
    reuse_from: Path | None = None,
) -> TidySummary:
    """Analyse every pending record of `build_dir` with `workers` clang-tidy processes at a time, taking
    identical analyses from the exported dataset `reuse_from` where it has them."""
    if workers < 1:
        raise UsageError(f"--workers must be at least 1 (got {workers})")
    if clang_tidy_binary() is None:
        raise UsageError(f"{CLANG_TIDY_MISSING}; nothing to do without it")
    summary = TidySummary()
    reusable = reusable_results(reuse_from) if reuse_from is not None else {}
    with Store.open_existing(build_dir, read_only=False) as store:

        def store_fields(job: TidyJob, fields: dict) -> None:  # from one thread only: the store's
            store.update_fields(job.task_id, job.kernel_id, fields)
            summary.updated += 1
            if fields["clang_tidy_warnings"] is None:
                summary.failed += 1
                summary.errors.append(f"{job.task_id} {job.kernel_id}: {json.loads(fields['clang_tidy'])}")
            else:
                summary.warnings += fields["clang_tidy_warnings"]
            if on_done is not None:
                on_done(job, fields)

        jobs = pending_jobs(store, redo)
        summary.pending = len(jobs)
        analyse = []
        for job in jobs:
            fields = reusable.get(reuse_key(job.language, job.source, job.compute_capability))
            if fields is None:
                analyse.append(job)
            else:
                summary.reused += 1
                store_fields(job, fields)
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(tidy_fields, job): job for job in analyse}
            for future in as_completed(futures):
                store_fields(futures[future], future.result())
    return summary
