"""The timing harness inside the child: clean baselines (`measure`) and a candidate's calls (`CallTimer`).

CUDA: an event pair on the current stream around each call, started behind a device spin that covers the host's
launch, so the interval is the device's work on the stream and not the host's launch or its wake-up from a
synchronize (those differ by process and by load); the whole device is synchronised after each call, and work
left running on another stream is the side-stream checks' (disqualifying); the caches are flushed by
writing config.L2_FLUSH_BYTES before each call. CPU: `time.perf_counter` with the same structure and a
cache-sized write before each call. Every call sees the SAME input buffers (contents copied in before it), so a
kernel that caches results by pointer returns stale outputs.

A clean baseline child times eager and torch.compile with `measure`, rotating its input sets and checking every
output. A candidate's window is refereed by the parent (`child/window.py`, `referee.py`): each timed call draws
fresh inputs from a seed the parent sends, so no content-keyed memo can hit, and its output is committed by digest
for the parent to judge. The figures the record keeps are the parent's, never this process's claims alone.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from builder import config
from builder.tasks import instantiate
from builder.verify.protocol.compare import (
    clone_output,
    compare_outputs,
    snapshot,
    sync,
)
from builder.verify.protocol.plan import (
    block_rule,
    calls_per_block,
    describe_method,
    relative_spread,
    runtime_stats,
    spin_ms_for,
    timing_seeds,
)


@dataclass
class InputSet:
    call: Callable[..., Any]  # runs the measured code on this set's model with the given inputs
    inputs: list[Any]
    reference: Any  # None: the set's first output stands in, and is handed to the parent's judge


class TimingMismatch(Exception):
    """An output produced while timing did not match its input set's reference."""


def build_input_sets(task_module: Any, seeds: list[int], device: str, make_call, with_reference: bool = True,
                     between_steps: Callable[[], None] | None = None) -> list[InputSet]:  # fmt: skip
    """One set per seed: make_call(model, seed) -> callable; the reference from the task's own Model only where
    `with_reference` (a clean process: never in a candidate's). `between_steps` runs before each set's model
    is made (the child yields the device there: a large model takes a while to build)."""
    import torch

    sets = []
    with torch.no_grad():
        for seed in seeds:
            if between_steps is not None:
                between_steps()
            model, inputs = instantiate(task_module, seed, device)
            reference = None
            if with_reference:
                reference = model(*snapshot(inputs))
                sync(device)
            sets.append(InputSet(call=make_call(model, seed), inputs=inputs, reference=reference))
    return sets


class LazyOutput(Exception):
    """forward returned something other than plain, materialised torch.Tensor outputs."""


def plain_output_reason(value: Any) -> str | None:
    """Why `value` holds a tensor that is not exactly torch.Tensor (a subclass, or an object that acts like a tensor
    through __torch_function__), or None. Such an output can run code when it is read, after the timed interval has
    ended. Other values (None, numbers) are left to the judge, which says what came back instead of tensors."""
    import torch

    pending = [value]
    while pending:
        item = pending.pop()
        if type(item) in (tuple, list):
            pending.extend(item)
        elif type(item) is not torch.Tensor and (isinstance(item, torch.Tensor) or hasattr(item, "__torch_function__")):
            return f"an output is a {type(item).__module__}.{type(item).__qualname__}, not a plain torch.Tensor"
    return None


class CallTimer:
    """Times single calls through one set of input buffers: warm-up calls rotate over the input sets; a refereed
    call (`time_fresh`) first draws fresh inputs from the seed the parent sent, outside the interval."""

    def __init__(self, sets: list[InputSet], device: str, atol: float, rtol: float, task_module: Any = None) -> None:
        import torch

        self.sets, self.device, self.atol, self.rtol = sets, device, atol, rtol
        self.task_module = task_module
        self.live = snapshot(sets[0].inputs)  # the buffers every call sees; contents change between calls
        if device == "cuda":
            self.flush = torch.empty(config.L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
        else:
            self.flush = torch.empty(config.CPU_CACHE_FLUSH_BYTES // 4, dtype=torch.float32)
        self.calls = 0
        self.first_outputs: dict[str, Any] = {}
        self.launch_ms: list[float] = []  # the host's time to launch each call (CUDA): what the spin must cover
        self.spin_cycles_per_ms = _spin_rate() if device == "cuda" else 0.0
        if device == "cuda":  # the digest's kernel loaded (or compiled) and checked now, not in the window's first call
            from builder.verify.protocol.output_digest import device_kernel

            device_kernel()
        self.held: dict[int, Any] = {}  # refereed call -> its output, until the parent has said which to reveal

    def time_call(self) -> float:
        """One call on the next input set; its time in ms (TimingMismatch when its output is stale)."""
        index = self.calls % len(self.sets)
        self.calls += 1
        self._load(self.sets[index].inputs)
        out, elapsed_ms = self._timed(self.sets[index].call, self.spin_cycles())
        if self.sets[index].reference is None:
            self.sets[index].reference = clone_output(out)
            self.first_outputs[f"timing{index}"] = self.sets[index].reference
        comparison = compare_outputs(out, self.sets[index].reference, self.atol, self.rtol)
        if not comparison.ok:
            raise TimingMismatch(
                f"timed call {self.calls} (input set {index + 1}): {comparison.error} - results reused across calls?"
            )
        return elapsed_ms

    def time_fresh(self, call_index: int, seed: int, spin_ms: float) -> list[Any]:
        """Refereed call `call_index` of the window on inputs drawn from `seed`, through the same buffers, on the
        model of input set call_index mod sets: [call_index, ms, digest of the output]. The output is held for the
        parent's reveal; LazyOutput when it is not plain tensors."""
        from builder.tasks import draw_inputs
        from builder.verify.protocol.window import digest

        self.calls += 1
        self._load(draw_inputs(self.task_module, seed, self.device))
        spin = int(spin_ms * self.spin_cycles_per_ms)
        out, elapsed_ms = self._timed(self.sets[call_index % len(self.sets)].call, spin)
        reason = plain_output_reason(out)
        if reason:
            raise LazyOutput(reason)
        self.held[call_index] = out
        return [call_index, elapsed_ms, digest(out)]

    def _load(self, values: list[Any]) -> None:
        import torch

        for buffer, value in zip(self.live, values, strict=True):
            if isinstance(buffer, torch.Tensor):
                buffer.copy_(value)
        self.flush.fill_(self.calls % 7)

    def _timed(self, call: Callable[..., Any], spin_cycles: int) -> tuple[Any, float]:
        import torch

        if self.device == "cuda":
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            # The device spins while the host launches: the stream's work, without the host's launch and wake-up
            # (eager: 1.15-1.20x between processes with them, 1.002x without); host work reading inputs is timed.
            torch.cuda._sleep(spin_cycles)
            start.record()
            began = time.perf_counter()
            out = call(*self.live)
            self.launch_ms.append((time.perf_counter() - began) * 1e3)
            end.record()
            torch.cuda.synchronize()  # every stream's work is done before the next call
            return out, start.elapsed_time(end)
        begin = time.perf_counter()
        out = call(*self.live)
        return out, (time.perf_counter() - begin) * 1e3

    def spin_cycles(self) -> int:
        """The spin before a warm-up call: twice the host's recent launch time, within the config's bounds."""
        return int(spin_ms_for(self.launch_ms) * self.spin_cycles_per_ms)


@functools.cache
def _spin_rate() -> float:
    """Device clock cycles per ms of `torch.cuda._sleep`, measured once per process."""
    import torch

    cycles, rates = 1_000_000, []
    torch.cuda._sleep(cycles)  # the first spin loads its kernel
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        rates.append(cycles / max(start.elapsed_time(end), 1e-3))
    return statistics.median(rates)


def measure(
    sets: list[InputSet],
    device: str,
    *,
    atol: float,
    rtol: float,
    warmup_calls: int = config.WARMUP_CALLS,
    timed_calls: int = config.TIMED_CALLS,
    budget_s: float = config.TIMING_BUDGET_S,
    min_calls: int = config.MIN_TIMED_CALLS,
) -> dict[str, Any]:
    """Time calls rotating over `sets`; returns {"runtime": stats, "timing_method": str, "first_outputs": {...}}
    (`timing{j}`: set j's first output, for the sets without a reference).

    Raises TimingMismatch when an output does not match its set's reference (caching across calls).
    """
    import torch

    timer = CallTimer(sets, device, atol, rtol)
    samples: list[float] = []
    # Every set is seen once before timing starts (a per-model torch.compile happens in warm-up).
    warmup_calls = max(warmup_calls, len(sets))
    with torch.no_grad():
        warm_ms = [timer.time_call() for _ in range(warmup_calls)]
        started = time.perf_counter()
        chunk = calls_per_block(statistics.median(warm_ms), round(timed_calls / config.TIMING_BLOCKS))
        settled = False
        for _ in range(max(timed_calls, 1)):
            samples.append(timer.time_call())
            enough = len(samples) >= min_calls or sum(samples) >= config.MIN_TIMED_MS
            if enough and time.perf_counter() - started > budget_s:
                break
            chunks = [statistics.median(samples[i : i + chunk]) for i in range(0, len(samples) - chunk + 1, chunk)]
            if len(samples) % chunk == 0 and len(chunks) >= config.MIN_TIMING_BLOCKS and enough:
                if relative_spread(chunks) <= config.TIMING_STABLE_SPREAD:
                    settled = True  # the median of further calls would not move
                    break
    method = describe_method(device, warmup_calls, len(samples), len(sets)) + f"; blocks of {chunk} calls{block_rule()}"
    if settled:
        spread = config.TIMING_STABLE_SPREAD
        method += f"; {config.TIMING_SETTLED_CLAUSE} the medians of {chunk}-call blocks varied by <= {spread:.0%}"
    return {"runtime": runtime_stats(samples), "timing_method": method, "first_outputs": timer.first_outputs}


@dataclass
class TimingSets:
    """A candidate's timers and PyTorch eager's, on their input sets, warmed up before the window: building the
    sets, the first calls (lazy set-up, algorithm choice) and taking each set's first output are not timed, and
    the window is the device's one serial resource."""

    candidate: CallTimer
    eager: CallTimer
    warmed: int  # warm-up pairs made before the window

    def first_outputs(self) -> dict[str, Any]:
        """Each input set's first output (`timing{j}`), for the parent's judge."""
        return self.candidate.first_outputs


def prepare_timing(binding: Any, task_module: Any, job: dict[str, Any], device: str,
                   between_steps: Callable[[], None] | None = None) -> TimingSets:  # fmt: skip
    """The timing input sets of a candidate that passed its checks, from seeds no trial used, each called once
    (run while the device is shared: `between_steps` between two steps)."""

    def make_call(model: Any, seed: int):
        return binding.bind(model, task_module, seed, device).call

    seeds, tolerance = timing_seeds(job), (float(job["atol"]), float(job["rtol"]))
    candidate_sets = build_input_sets(task_module, seeds, device, make_call, False, between_steps)
    candidate = CallTimer(candidate_sets, device, *tolerance, task_module=task_module)
    eager_sets = build_input_sets(task_module, seeds, device, lambda model, seed: model, False, between_steps)
    eager = CallTimer(eager_sets, device, *tolerance, task_module=task_module)
    warmed = warm_up(candidate, eager, 0, between_steps)  # one pair per set (first calls); the window warms up again
    return TimingSets(candidate, eager, warmed)


def warm_up(candidate: CallTimer, eager: CallTimer, calls: int, between_steps: Callable[[], None] | None = None) -> int:
    """Warm-up pairs, at least one per input set (each set's first output is taken here); returns how many.
    `between_steps` runs between two pairs (their work synchronised): the child yields the device there."""
    import torch

    calls = max(calls, len(candidate.sets))
    with torch.no_grad():
        for index in range(calls):
            if index and between_steps is not None:
                between_steps()
            candidate.time_call()
            eager.time_call()
    return calls
