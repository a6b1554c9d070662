"""The judge's comparisons in a few trusted judge processes (trusted parent side).

Judging reads a candidate's output files and compares them with the clean reference's, on the CPU. Done in the
builder's own process, the judges of all its evaluation workers shared one interpreter with the watchers that
poll for the children's words and with the engine's threads, and took turns at it. Each comparison is a pure
function of two directories, a manifest and the tolerances, so it runs in a process of its own (spawned, never
forked from a threaded parent) and only the small findings come back. The processes run this package's code on
files, never a candidate's code; a broken pool gives way to judging in the calling thread.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from builder import config
from builder.verify import judge, tensor_files

# Where outputs are: a directory written by `tensor_files.write_dir` and the most bytes one of its files may
# hold, or (tests) the unpacked values themselves.
OutputsSource = tuple[str, int] | dict[str, Any]

_pool: ProcessPoolExecutor | None = None
_pool_lock = threading.Lock()


def source_of(outputs: Any) -> OutputsSource:
    """What a judge process needs to read `outputs` (a tensor_files.OutputsDir, or a dict of unpacked values)."""
    if isinstance(outputs, tensor_files.OutputsDir):
        return (str(outputs.directory), outputs.max_file_bytes)
    return outputs


def _open(source: OutputsSource, keep_loaded: bool) -> Any:
    if isinstance(source, tuple):
        return tensor_files.OutputsDir(source[0], source[1], keep_loaded=keep_loaded)
    return source


def find_checks(candidate: OutputsSource, reference: OutputsSource, manifest: dict[str, Any], atol: float,
                rtol: float) -> judge.CheckFindings:  # fmt: skip
    """`judge.find_checks` on two sources (raises tensor_files.OutputFileError for a candidate directory that
    cannot be read)."""
    return judge.find_checks(_open(candidate, True), _open(reference, False), manifest, atol, rtol)


def judge_timing(candidate: OutputsSource, reference: OutputsSource, sets: int, atol: float,
                 rtol: float) -> str | None:  # fmt: skip
    """`judge.judge_timing` on two sources."""
    return judge.judge_timing(_open(candidate, True), _open(reference, False), sets, atol, rtol)


def run(function: Any, *args: Any) -> Any:
    """`function(*args)` in a judge process (this module's functions only), or here if the pool is broken."""
    pool = _judge_pool()
    if pool is not None:
        try:
            return pool.submit(function, *args).result()
        except BrokenProcessPool:
            _discard(pool)
    return function(*args)


def _judge_pool() -> ProcessPoolExecutor | None:
    global _pool
    with _pool_lock:
        if _pool is None and config.JUDGE_PROCESSES > 0:
            workers = max(1, min(config.JUDGE_PROCESSES, os.cpu_count() or 1))
            # Processes start as work arrives (a build with one evaluation worker keeps one busy).
            _pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
        return _pool


def _discard(pool: ProcessPoolExecutor) -> None:
    global _pool
    with _pool_lock:
        if _pool is pool:
            _pool = None
    pool.shutdown(wait=False, cancel_futures=True)


def shutdown() -> None:
    """End the judge processes (a new pool starts at the next judgement)."""
    with _pool_lock:
        pool = _pool
    if pool is not None:
        _discard(pool)
