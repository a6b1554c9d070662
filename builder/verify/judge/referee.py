"""The trusted parent's referee of a candidate's timing window (trusted side).

Everything in the candidate's process belongs to the candidate, the timer included. So the parent runs the
window (`protocol/window.py`): it sends each half-block's call indices and fresh input seeds, times the half-block
on its own clock from its "go" to the child's "done", and, once a half-block has ended, picks the calls whose
outputs the child must reveal (those with a clean reference, chosen in secret when the task's reference was
computed). Half-blocks of the candidate and of PyTorch eager alternate, through the same harness, so what the
parent's clock holds beyond the child's claimed times (the harness: drawing inputs, the flush, the spin, the
digests, the hand-shake) is alike for both. `judge_window` turns what was seen into the record's figures and flags.
"""

from __future__ import annotations

import math
import secrets
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder import config
from builder.verify.protocol.output_digest import is_digest
from builder.verify.protocol.plan import calls_per_block, job_counts, relative_spread, spin_ms_for
from builder.verify.protocol.window import LinkClosed


class BrokenWindow(Exception):
    """The child broke the hand-shake: a wrong answer, a missing one, or a failure it reported."""

    def __init__(self, why: str, kind: str = "hand_shake") -> None:
        super().__init__(why)
        self.kind = kind


@dataclass
class HalfBlock:
    kind: str  # "candidate" or "eager"
    wall_ms: float  # the parent's clock, from its "go" to the child's "done"
    calls: list[tuple[int, float, list[str]]]  # (call index, claimed ms, output digests)

    def claimed_ms(self) -> list[float]:
        return [ms for _, ms, _ in self.calls]

    def unaccounted_ms(self) -> float:
        """The parent's time per call beyond the child's claimed times."""
        return (self.wall_ms - sum(self.claimed_ms())) / max(len(self.calls), 1)


@dataclass
class WindowReport:
    """What the parent saw of one window."""

    halves: list[HalfBlock] = field(default_factory=list)
    warmed: int = 0
    per_block: int = 0
    spin_ms: float = 0.0
    revealed: dict[int, Any] = field(default_factory=dict)  # call index -> the unpacked outputs read back
    failure: str | None = None
    failure_kind: str | None = None  # "hand_shake", "lazy_output", "stale_output", "candidate_error"
    stopped_early: bool = False
    seconds: dict[str, float] = field(default_factory=dict)  # the parent's wall by exchange ("warmed", "halves", ...)

    def digests(self) -> dict[int, list[str]]:
        return {m: d for half in self.halves if half.kind == "candidate" for m, _, d in half.calls}


def timed_samples(manifest: dict[str, Any]) -> dict[int, tuple[int, int]]:
    """The calls with a clean reference: call index -> (input set, seed), from the private manifest."""
    samples = {}
    for entry in manifest.get("timed_samples") or []:
        m, input_set, seed = (int(v) for v in entry)
        samples[m] = (input_set, seed)
    return samples


def choose_timed_samples(timed_calls: int, sets: int) -> list[list[int]]:
    """The timed calls whose outputs the parent will judge, in secret: [call index, input set, input seed], spread
    over the window (config.TIMED_SAMPLE_RANGES scaled to `timed_calls`) so a window that ends early has some."""
    scale = max(timed_calls, 1) / 100
    chosen: set[int] = set()
    for first, end, count in config.TIMED_SAMPLE_RANGES:
        low, high = min(int(first * scale), timed_calls - 1), min(max(int(end * scale), 1), timed_calls)
        pool = [m for m in range(max(low, 0), high) if m not in chosen]
        for _ in range(min(count, len(pool))):
            chosen.add(pool.pop(secrets.randbelow(len(pool))))
    return [[m, m % max(sets, 1), secrets.randbits(config.SEED_BITS)] for m in sorted(chosen)]


class Referee:
    def __init__(self, link: Any, reveal_dir: str | Path, manifest: dict[str, Any], job: dict[str, Any],
                 abort: Any = None) -> None:  # fmt: skip
        self.link, self.reveal_dir, self.job, self.abort = link, Path(reveal_dir), job, abort
        self.samples = timed_samples(manifest)
        self.device = "cuda" if job.get("backend") == "cuda" else "cpu"
        output_bytes = sum(int(n) for n in manifest.get("output_bytes") or [])
        self.file_limit = 2 * output_bytes + config.OUTPUTS_FILE_SLACK_BYTES
        # Sampled outputs are kept on the child's host and written once the device is given back, where they fit.
        self.keep = len(self.samples) * output_bytes <= config.REVEAL_KEPT_MAX_BYTES
        self._kept: list[int] = []
        self.report = WindowReport()

    def run(self, after_window: Callable[[], None] | None = None) -> WindowReport:
        """The window, then the reveals of the sampled outputs kept on the child's host. `after_window` runs once
        the last half-block has ended (or the window broke), before those reveals: the caller gives the device back
        there, since writing and reading files is no device work."""
        try:
            try:
                self._run()
            finally:
                if after_window is not None:
                    after_window()
            if self._kept:
                self._read_reveals(self._kept)
            self._ask({"end": True}, "ended")
        except BrokenWindow as exc:
            self.report.failure, self.report.failure_kind = str(exc), exc.kind
        except LinkClosed as exc:
            self.report.failure, self.report.failure_kind = f"the window's hand-shake broke: {exc}", "hand_shake"
        return self.report

    def _ask(self, message: dict[str, Any], answer_key: str) -> tuple[dict[str, Any], float]:
        began = time.perf_counter()
        self.link.send(message)
        answer = self.link.receive(abort=self.abort)
        wall_ms = (time.perf_counter() - began) * 1e3
        exchange = "halves" if answer_key == "done" else answer_key  # where a window's wall goes, for the bench
        self.report.seconds[exchange] = self.report.seconds.get(exchange, 0.0) + wall_ms / 1e3
        if "failed" in answer:
            raise BrokenWindow(str(answer.get("failed"))[:2000], str(answer.get("kind") or "candidate_error"))
        if answer_key not in answer:
            raise BrokenWindow(f"the child answered {sorted(answer)[:4]} where {answer_key!r} was due")
        return answer, wall_ms

    def _run(self) -> None:
        counts = job_counts(self.job)
        warmed, _ = self._ask({"warm": counts["warmup_calls"]}, "warmed")
        pair_ms = [float(v) for v in warmed.get("pair_ms") or [] if _finite(v)]
        self.report.warmed = len(pair_ms)
        blocks = max(1, min(config.TIMING_BLOCKS, counts["timed_calls"]))
        most = max(1, round(counts["timed_calls"] / blocks))
        per_block = calls_per_block(statistics.median(pair_ms), most) if pair_ms else most
        launch = warmed.get("launch_ms")
        spin_ms = spin_ms_for([float(launch)]) if self.device == "cuda" and _finite(launch) else 0.0
        if self.device == "cuda" and not _finite(launch):
            spin_ms = config.LAUNCH_SPIN_MIN_MS
        self.report.per_block, self.report.spin_ms = per_block, spin_ms
        started, candidate_calls, eager_calls = time.perf_counter(), 0, 0
        ratios: list[float] = []
        medians: list[float] = []
        block = 0
        while True:
            order = ("candidate", "eager") if block % 2 == 0 else ("eager", "candidate")
            claimed: dict[str, list[float]] = {}
            for kind in order:
                first = candidate_calls if kind == "candidate" else eager_calls
                half = self._half_block(block, kind, first, per_block, spin_ms)
                claimed[kind] = half.claimed_ms()
                if kind == "candidate":
                    candidate_calls += per_block
                    self._reveal(half)
                else:
                    eager_calls += per_block
            medians.append(statistics.median(claimed["candidate"]))
            ratios.append(statistics.median(claimed["eager"]) / max(medians[-1], 1e-9))
            timed = [ms for h in self.report.halves if h.kind == "candidate" for ms in h.claimed_ms()]
            enough = (len(timed) >= counts["min_calls"] or sum(timed) >= config.MIN_TIMED_MS) and (
                block + 1 >= config.MIN_TIMING_BLOCKS
            )
            if enough and time.perf_counter() - started > counts["budget_s"]:
                break
            stable = config.TIMING_STABLE_SPREAD
            # A window whose accounting would flag it so far runs on to TIMING_BLOCKS (or its budget) before it is
            # judged: a lie is in every half-block, a loaded machine's stalls come and go, and the lower quartile
            # over more half-blocks sees past them.
            if (enough and relative_spread(ratios) <= stable and relative_spread(medians) <= stable
                    and not self._unaccounted_so_far()):  # fmt: skip
                self.report.stopped_early = True
                break
            block += 1
            # A window of fewer blocks than TIMING_BLOCKS (a job of few timed calls) that would be flagged runs on
            # to TIMING_BLOCKS as well: over four or five half-blocks, a stall in most of the candidate's (a lost
            # scheduler tick on a loaded CPU) reads as time its claims leave out.
            if block >= blocks and (block >= config.TIMING_BLOCKS or not self._unaccounted_so_far()):
                break

    def _unaccounted_so_far(self) -> bool:
        """Whether the half-blocks run so far leave the parent's clock holding more than the claims account for."""
        candidate = [h for h in self.report.halves if h.kind == "candidate"]
        eager = [h for h in self.report.halves if h.kind == "eager"]
        return bool(candidate and eager) and accounting_reason(candidate, eager, self.device) is not None

    def _half_block(self, block: int, kind: str, first: int, calls: int, spin_ms: float) -> HalfBlock:
        plan = []
        for m in range(first, first + calls):
            sample = self.samples.get(m) if kind == "candidate" else None
            plan.append([m, sample[1] if sample else secrets.randbits(config.SEED_BITS)])
        answer, wall_ms = self._ask({"go": block, "kind": kind, "calls": plan, "spin_ms": spin_ms}, "done")
        got = answer.get("calls")
        if answer.get("done") != block or not isinstance(got, list) or len(got) != calls:
            raise BrokenWindow(f"the child's answer to half-block {block} ({kind}) does not match what was asked")
        parsed = []
        for (m, _), entry in zip(plan, got, strict=True):
            if not (isinstance(entry, list) and len(entry) == 3 and entry[0] == m and _finite(entry[1])
                    and entry[1] >= 0 and isinstance(entry[2], list) and all(is_digest(d) for d in entry[2])):  # fmt: skip
                raise BrokenWindow(f"the child's answer for call {m} ({kind}) is malformed")
            parsed.append((m, float(entry[1]), list(entry[2])))
        half = HalfBlock(kind, wall_ms, parsed)
        self.report.halves.append(half)
        return half

    def _reveal(self, half: HalfBlock) -> None:
        """The sampled calls of a half-block that has ended, committed by digest: the child copies their outputs to
        its host now (`keep`) and writes them once the window is over, or writes them now where they are large."""
        wanted = [m for m, _, _ in half.calls if m in self.samples]
        if not wanted:
            return
        if not self.keep:
            self._read_reveals(wanted)
            return
        answer, _ = self._ask({"keep": wanted}, "kept")
        if answer.get("kept") != wanted:
            raise BrokenWindow(f"the child kept {answer.get('kept')} where {wanted} was asked")
        self._kept.extend(wanted)

    def _read_reveals(self, wanted: list[int]) -> None:
        """The child writes the outputs of the calls `wanted`; the parent reads them back."""
        from builder.verify.protocol import tensor_files

        answer, _ = self._ask({"reveal": wanted}, "revealed")
        if answer.get("revealed") != wanted:
            raise BrokenWindow(f"the child revealed {answer.get('revealed')} where {wanted} was asked")
        for m in wanted:
            path = self.reveal_dir / f"timed{m}.safetensors"
            try:
                values = tensor_files.read(path, self.file_limit)
            except tensor_files.OutputFileError as exc:
                raise BrokenWindow(f"revealed output of call {m}: {exc}") from None
            finally:
                path.unlink(missing_ok=True)
            self.report.revealed[m] = values.get(f"timed{m}")


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def accounting_reason(candidate: list[HalfBlock], eager: list[HalfBlock], device: str) -> str | None:
    """Why the parent's clock cannot account for the candidate's claimed times, or None."""
    for half in candidate + eager:
        if sum(half.claimed_ms()) > half.wall_ms * (1 + config.TIMING_CLAIM_OVER_WALL) + config.TIMING_CLAIM_SLACK_MS:
            return (f"a {half.kind} half-block claimed {sum(half.claimed_ms()):.3f} ms of calls in "
                    f"{half.wall_ms:.3f} ms of the parent's clock")  # fmt: skip
    # The lower quartile over half-blocks: load from other processes only adds time, and comes and goes, where
    # time a candidate's claims leave out is in every half-block.
    unaccounted_candidate = lower_quartile([h.unaccounted_ms() for h in candidate])
    unaccounted_eager = lower_quartile([h.unaccounted_ms() for h in eager])
    claimed = statistics.median(ms for h in candidate for ms in h.claimed_ms())
    eager_spread = [h.unaccounted_ms() for h in eager]
    noise = statistics.quantiles(eager_spread, n=4, method="inclusive") if len(eager_spread) >= 2 else [0.0, 0.0, 0.0]
    allowed = (config.TIMING_ACCOUNT_SHARE * claimed + config.TIMING_ACCOUNT_OVERHEAD_SHARE * max(unaccounted_eager, 0)
               + config.TIMING_ACCOUNT_NOISE_IQRS * (noise[2] - noise[0])
               + config.TIMING_ACCOUNT_SLACK_MS[device])  # fmt: skip
    excess = unaccounted_candidate - unaccounted_eager
    if excess > allowed:
        return (f"per timed call the parent's clock held {excess:.3f} ms more beyond the claimed times than for "
                f"PyTorch eager in the same window (claimed median {claimed:.3f} ms; allowed {allowed:.3f} ms)")  # fmt: skip
    return None


def lower_quartile(values: list[float]) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=4, method="inclusive")[0]
