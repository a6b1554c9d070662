"""Shared builds: several candidates compiled as one extension, so the torch-header cost is paid once.

Which candidates may share a build, and the shared source, are `shared_source.py`'s; this module sizes the builds
and fills each with candidates of one header rung (`batch_sizes`, `plan_batches`) and runs them (`compile_many`).
A batch that fails to compile is split by its log (`blame`: the candidates its errors point at are built alone,
the rest together again), or bisected when the log names nobody, so each candidate gets its own verdict and a
failing one its own compiler message.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import Executor
from dataclasses import replace
from functools import partial
from typing import Any

from builder import config
from builder.verify.compile.build_queue import BuildQueue
from builder.verify.compile.extension import CompileResult
from builder.verify.compile.headers import Rung, lightest_rung
from builder.verify.compile.shared_source import WrappedCandidate, blame, shared_source, wrap_candidate

BuildFn = Callable[..., CompileResult]  # (source, language[, urgent=True]) -> CompileResult


def batch_sizes(count: int, largest: int, workers: int = 1, first: int | None = None) -> list[int]:
    """The sizes of the shared builds that hold `count` candidates, in the order they are built.

    A build runs on one core and pays the torch headers once, then a little per kernel: no build holds more
    than `largest`, nor more than an even share of the `workers` (idle compile workers would leave the
    device waiting for the longest build). `first`, when given, starts a ramp (first, twice that, ...): the
    device has nothing to do until the first build is done, and a small build is done soonest."""
    sizes: list[int] = []
    ramp = _ramp(count, largest, workers, first)
    while (left := count - sum(sizes)) > 0:
        sizes.append(min(next(ramp), left))
    return sizes


def _ramp(count: int, largest: int, workers: int, first: int | None) -> Iterator[int]:
    """`batch_sizes`'s sizes, without end: the ramp from `first`, then the cap."""
    cap = max(1, min(largest, -(-count // max(1, workers))))
    size = cap if first is None else max(1, min(first, cap))
    while True:
        yield size
        size = min(cap, size * 2)


def plan_batches(
    sources: Sequence[tuple[str, str]],
    batch_size: int = config.COMPILE_BATCH_SIZE,
    workers: int = 1,
    first_batch_size: int | None = None,
    skip: Collection[int] = (),
    alone_asked: Collection[int] = (),
) -> tuple[list[list[tuple[int, WrappedCandidate]]], list[int], dict[int, str]]:
    """(shared batches of (index, wrapped), indices to build alone, index -> reason it was kept alone).

    Each language's safe candidates are cut by `batch_sizes`'s ramp (at most `batch_size` a build), each build
    taking the candidates that fit the same lightest header rung (`headers.lightest_rung`) in order, from the
    rung of the earliest candidate left: a shared build is built on the rung all its members fit, so one
    candidate that needs the light headers would make a lean build of eleven others light (30-50 % more
    core-s, and later: docs/benchmarks.md). The indices in `skip` (already built) are left out, those in
    `alone_asked` built on their own."""
    alone: list[int] = []
    reasons: dict[int, str] = {}
    safe: dict[str, list[tuple[int, WrappedCandidate]]] = {}
    for index, (source, language) in enumerate(sources):
        if language not in ("cuda", "cpp") or index in skip:
            continue  # python candidates are not compiled
        if index in alone_asked:
            alone.append(index)
            reasons[index] = "asked to be built alone"
            continue
        wrapped = wrap_candidate(source, f"ka_c{index}")
        if isinstance(wrapped, str):
            alone.append(index)
            reasons[index] = wrapped
        else:
            safe.setdefault(language, []).append((index, wrapped))
    batches: list[list[tuple[int, WrappedCandidate]]] = []
    for members in safe.values():
        by_rung: dict[Rung, deque[tuple[int, WrappedCandidate]]] = {}
        for member in members:
            by_rung.setdefault(lightest_rung(sources[member[0]][0]), deque()).append(member)
        ramp = _ramp(len(members), max(1, batch_size), workers, first_batch_size)
        while rungs := [waiting for waiting in by_rung.values() if waiting]:
            waiting = min(rungs, key=lambda left: left[0][0])  # the rung of the earliest candidate left
            group = [waiting.popleft() for _ in range(min(next(ramp), len(waiting)))]
            if len(group) == 1:
                alone.append(group[0][0])  # build a lone candidate from its own source (same cache key as verify)
            else:
                batches.append(group)
    return batches, sorted(alone), reasons


def compile_many(
    sources: Sequence[tuple[str, str]],
    build: BuildFn,
    batch_size: int = config.COMPILE_BATCH_SIZE,
    executor: Executor | None = None,
    on_result: Callable[[int, CompileResult], None] | None = None,
    workers: int = 1,
    first_batch_size: int | None = None,
    queue: BuildQueue | None = None,
    window: int = 0,
    recall: Callable[[str, str], CompileResult | None] | None = None,
    remember: Callable[[CompileResult, list[tuple[str, str]]], None] | None = None,
    alone: Collection[int] = (),
    build_shared: BuildFn | None = None,
    build_culprit: BuildFn | None = None,
    urgent_builds: int = 0,
    after: threading.Event | None = None,
    queued: threading.Event | None = None,
) -> list[CompileResult | None]:
    """Compile candidates (source, language) with shared builds where safe; None for python candidates.

    A shared build that fails is split by `blame` (the candidates its log points at alone, the rest together), or
    bisected where the log names nobody, down to the candidate that fails alone. `on_result(index, result)` is
    called as each candidate's build finishes (to start evaluating it); `workers` and `first_batch_size` size the
    builds (`batch_sizes`). Returns once every build of these candidates has ended.

    Builds wait in one queue (`queue`, shared by a stream's windows, numbered by `window`; else one of their
    own on `executor`), each worker taking the first: an earlier window's builds first; within a window, builds
    of candidates that may still be evaluated before culprits rebuilt for their own message only, each kind in
    the candidates' order. So a failed build's rebuild goes before later builds still waiting, as its
    candidates' place says (the device waits for them).

    `recall(source, language)` finds a candidate's earlier build, however it was batched then (those are not
    built again); `remember(shared, [(source, symbol prefix), ...])` notes a good shared build for its members.
    The candidates at `alone` are built on their own. `build_shared` builds shared sources, `build_culprit` the
    candidates a failed one's log named, `build` the rest (what each tries: `HeaderTries`). The first
    `urgent_builds` builds queued (a stream's first window: its ramp) are called with `urgent=True`: the ones the
    device waits on (`extension.build_extension`). A failed urgent build's other members stay urgent when built
    again; the candidates its log named, rebuilt for their own message only, do not.

    `after`, when given, is waited for before any build is queued, and `queued` is set once they all are: a stream's
    later window queues its builds after the earlier one's. A worker takes the first build waiting when it is free,
    so a later window that planned sooner (fewer candidates) would otherwise fill the idle workers at the start,
    ahead of the first window's small first builds."""
    queue = queue if queue is not None else BuildQueue(executor)
    recalled = {index: found for index, (source, language) in enumerate(sources)
                if recall is not None and language in ("cuda", "cpp") and (found := recall(source, language))}  # fmt: skip
    batches, alone, _ = plan_batches(sources, batch_size, workers, first_batch_size, skip=recalled, alone_asked=alone)
    results: list[CompileResult | None] = [None] * len(sources)
    done = threading.Condition()
    pending = 0
    errors: list[BaseException] = []

    def finish(index: int, result: CompileResult) -> None:
        results[index] = result
        if on_result is not None:
            on_result(index, result)

    def run_alone(index: int, how: BuildFn = build, urgent: bool = False) -> None:
        finish(index, how(*sources[index], **({"urgent": True} if urgent else {})))

    def run_batch(group: list[tuple[int, WrappedCandidate]], urgent: bool = False) -> None:
        names = [f"c{index}" for index, _ in group]
        language = sources[group[0][0]][1]
        source = shared_source([w for _, w in group], names)
        shared = (build_shared or build)(source, language, **({"urgent": True} if urgent else {}))
        if not shared.ok and shared.infrastructure:  # the machinery failed, not a member: bisecting would not help
            for index, _ in group:
                finish(index, replace(shared, batch_size=len(group)))
            return
        again = partial(run_alone, urgent=True) if urgent else run_alone  # the device still waits on the others
        again_shared = partial(run_batch, urgent=True) if urgent else run_batch
        if not shared.ok and (culprits := blame(shared, source)) & {index for index, _ in group}:
            # the log names who failed: they are built alone (their own message), the rest together again
            rest = [member for member in group if member[0] not in culprits]
            if len(rest) == 1:
                submit(again, rest[0][0])
            elif rest:
                submit(again_shared, rest)
            for index, _ in group:
                if index in culprits:
                    submit(partial(run_alone, how=build_culprit or build), index, culprit=True)
            return
        if not shared.ok:  # nobody named: one bad candidate must not fail the others, build each half again
            middle = len(group) // 2
            for half in (group[:middle], group[middle:]):
                if len(half) == 1:
                    submit(again, half[0][0])
                else:
                    submit(again_shared, half)
            return
        if remember is not None:
            remember(shared, [(sources[index][0], f"{name}.") for (index, _), name in zip(group, names, strict=True)])
        for (index, _), name in zip(group, names, strict=True):
            finish(index, replace(shared, symbol_prefix=f"{name}.", batch_size=len(group)))

    def ended(error: BaseException | None) -> None:
        nonlocal pending
        with done:
            if error is not None:
                errors.append(error)
            pending -= 1
            done.notify_all()

    def submit(fn: Callable[[Any], None], arg: Any, culprit: bool = False) -> None:
        nonlocal pending
        first = arg if isinstance(arg, int) else arg[0][0]
        with done:
            pending += 1
        try:
            queue.submit((window, int(culprit), first), fn, arg, ended)
        except RuntimeError as exc:  # the pool was shut down (a stopping build): count it as ended
            ended(exc)

    # In the candidates' order: a candidate built alone (a lone one, or one that cannot share a build) is taken
    # in its place, not queued behind every shared build; the first build is the first a worker takes.
    builds = [(group[0][0], run_batch, group) for group in batches] + [(index, run_alone, index) for index in alone]
    if after is not None:
        after.wait()
    for position, (_, fn, arg) in enumerate(sorted(builds, key=lambda item: item[0])):
        submit(partial(fn, urgent=True) if position < urgent_builds else fn, arg)
    if queued is not None:
        queued.set()
    for index, found in recalled.items():  # after the builds are queued: the workers start while these are offered
        finish(index, found)
    with done:  # halves are submitted from pool threads: wait for the count, not for the first futures
        done.wait_for(lambda: pending == 0)
    if errors:
        raise errors[0]
    return results
