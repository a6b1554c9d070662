"""Verification throughput: verified kernels/hour through `Verifier.stream` (the engine `kernel-archive build`
runs), with where the time went: compile core-seconds, GPU-busy and GPU-idle seconds and timing windows per
kernel, clean reference and baseline seconds per task, child start-up, and the cores' busy seconds by kind of
work (builds, baseline, reference and evaluation children, the parent) before and after the first evaluated
record (`cpu_census.py`).

Runs the CUDA backend when a GPU is visible, else the CPU backend (slow: a CPU torch extension build
takes tens of seconds here). Distinct kernels are made from the bundled corpus by appending a
variant comment (a new source is a new kernel: no compile-cache hits); `--warm-repeat N` evaluates each of them N
times in the warm runs, on its cached build. Prints figures and the machine.

    python benchmarks/bench_verify_throughput.py [--kernels N] [--tasks N] [--backend cuda|cpu]
                                                 [--eval-workers 1,4] [--skip startup,compile] [--profile]
                                                 [--warm-gpus 1@16,2,1] [--engines N]
                                                 [--judge-poll-max S] [--child-start fork|exec]
                                                 [--fork-references] [--refill-at-once]
                                                 [--device-reserve 0,N] [--device-connections default,N]
                                                 [--warm-repeat N] [--kernelbench N]

While it runs, a stall report (`gate_watch.py`) prints the gate's state and the builder's processes once an
owner has held the device, or owners have waited for checks, for 30 s. Under a time limit (`timeout`'s SIGTERM)
the stream in progress stops and its figures count the records it made.

On CUDA the first pass's first `--kernelbench` kernels (32) then go through KernelBench's own flow where KernelBench
is importable (`kernelbench_flow.py`), and its rate is printed beside this engine's.

`--profile` verifies as `kernel-archive build` does on CUDA by default: with Nsight Compute, the torch profiler
and clang-tidy (where installed) attached to each record.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import platform
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.cpu_census import CpuCensus, census_lines, smt_line  # noqa: E402
from benchmarks.gate_watch import GateWatch  # noqa: E402
from benchmarks.gpu_places import (  # noqa: E402
    Place,
    on_place,
    parse_places,
    pass_agreement,
    place_name,
    places_that_fit,
    scaling_lines,
)
from benchmarks.kernelbench_flow import side_by_side  # noqa: E402
from benchmarks.throughput_arguments import throughput_arguments  # noqa: E402
from benchmarks.throughput_figures import (  # noqa: E402
    alone_at_the_end,
    copy_agreement,
    engine_lines,
    middle_rate,
    milestone_line,
    show,
)
from benchmarks.throughput_mix import corpus, repeat_pairs  # noqa: E402
from benchmarks.throughput_observers import CountingVerifier, GpuSampler, PhaseLog, profile_note  # noqa: E402
from benchmarks.throughput_parts import measure_compile, measure_startup  # noqa: E402
from builder import config  # noqa: E402
from builder.verify import environment, milestones  # noqa: E402
from builder.verify.engine import work_queues  # noqa: E402
from builder.verify.engine.device_gate import (
    device_gate,  # noqa: E402
)
from builder.verify.options import VerifyOptions  # noqa: E402
from builder.verify.sandbox import bytecode_cache  # noqa: E402
from builder.verify.sandbox.process import resolve_isolation  # noqa: E402
from schemas import record_to_dict  # noqa: E402

RECORD_BULK = ("cuda_code", "reference_module_code", "reference_functional_code", "embedding", "ncu_profile",
               "torch_profile", "clang_tidy")  # left out of --records: sources and profiles  # fmt: skip


class RunCutShort(Exception):
    """SIGTERM (a time limit's `timeout`) during a stream: it stops, and the figures count the records it made."""


CUT_SHORT = threading.Event()  # set once a run was cut short: later stages are skipped


def cut_short(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
    CUT_SHORT.set()
    raise RunCutShort


def measure_stream(
    pairs, options: VerifyOptions, label: str, records_path: Path | None = None, kept: list | None = None
) -> dict[str, float]:
    """One pass of `pairs` through the engine: its figures (printed as they are measured); its records appended to
    `kept` where given."""
    gate = device_gate(options.backend, options.device_index)
    before = gate.snapshot()
    verifier = CountingVerifier(options)
    print(f"{label}: workers as the engine fixed them: {verifier.options.workers_per_device()} evaluation a device, "
          f"{verifier.options.compile_workers} compile", flush=True)  # fmt: skip
    phase_log = PhaseLog()
    engine_log = logging.getLogger("builder.verify.engine.verifier")
    engine_log.addHandler(phase_log)
    engine_log.setLevel(logging.DEBUG)
    routing_log = logging.getLogger("builder.verify.engine.device_engines")  # its hand-backs at the end
    routing_log.addHandler(phase_log)
    routing_log.setLevel(logging.DEBUG)
    sampler = GpuSampler()
    sampler.start()
    watch = GateWatch(gate)
    watch.start()
    census = CpuCensus()
    census.start()
    milestones.clear()  # this process's own (an engine process keeps its own, sent in its totals)
    started = time.monotonic()
    records, first, first_evaluated, at_first_evaluated, evaluated_at, cut_at = [], None, None, None, 0, None
    times: list[float] = []  # each record's, from the start
    stream = verifier.stream(pairs)
    try:
        for record in stream:
            records.append(record)
            if kept is not None:
                kept.append(record)
            times.append(time.monotonic() - started)
            first = first if first is not None else time.monotonic() - started
            if first_evaluated is None and record.eval_s is not None:  # compile errors come first, unevaluated
                first_evaluated, evaluated_at = time.monotonic() - started, len(records)
                at_first_evaluated = gate.snapshot()  # the device's time before it: the start
                census.mark("after the first evaluated record")
            # A line per record: a run cut short still shows the rate it was reaching.
            phases = phase_log.by_kernel.get(record.kernel_name) or {}
            where = " ".join(f"{name}={seconds:.1f}" for name, seconds in phases.items()
                             if not name.startswith(("cpu.", "rq.", "device_allocs.")))  # fmt: skip
            print(f"  [{time.monotonic() - started:7.1f} s] {len(records):3d} {record.task_id:6s} {record.status:14s} "
                  f"eval {record.eval_s or 0:5.1f} s  {where}{profile_note(record) if options.profile else ''}",
                  flush=True)  # fmt: skip
            if records_path is not None:  # as they come: a run cut short keeps what it made
                with records_path.open("a") as out:
                    fields = {name: value for name, value in record_to_dict(record).items() if name not in RECORD_BULK}
                    out.write(json.dumps(dict(fields, bench_label=label), default=str) + "\n")
    except RunCutShort:  # in the stream's wait or between records: the stream's clean-up runs below
        cut_at = time.monotonic()
        print(f"  {label}: cut short after {len(records)} of {len(pairs)} records, at "
              f"{time.monotonic() - started:.1f} s: the figures count those", flush=True)  # fmt: skip
    finally:
        stream.close()  # stops its builds and children (a stream that ended or raised is closed already)
    wall = (cut_at or time.monotonic()) - started
    sampler.stop()
    watch.stop()
    for line in verifier.start_lines(started, first_evaluated):
        print(f"  {label}: before the first evaluated record, {line}")
    print(
        f"  {label}: {'builder process: ' if verifier.engine_devices else ''}"
        f"{milestone_line(milestones.marks(), started)}"
    )
    for record in records:  # which kernels failed and why: a loaded machine must not turn a correct one incorrect
        if record.status not in ("correct", "compile_error"):
            reason = (record.error or "").strip().splitlines()[:1]
            print(f"  {label}: {record.status}: {record.task_id} {record.kernel_name} flags={list(record.flags or [])} "
                  f"{reason[0][:160] if reason else ''}")  # fmt: skip
    for line in census_lines(census.stop()):
        print(f"  {label}: cores, {line}")
    engine_log.removeHandler(phase_log)
    routing_log.removeHandler(phase_log)
    for name, value in phase_log.means().items():  # "device_allocs." phases and the collections are counts
        unit = "  " if name.startswith("device_allocs.") or name.endswith("_collections") else " s"
        print(f"  {label}: child phase {name:36s} {value:8.3f}{unit} (mean of {len(phase_log.phases)})")
    n = max(1, len(records))
    tasks = max(1, len({r.task_id for r in records}))
    statuses: dict[str, int] = {}
    for record in records:
        statuses[record.status] = statuses.get(record.status, 0) + 1
    print(f"  {label} statuses:", statuses)
    queues = Counter(r.device_connections for r in records if r.eval_s is not None)  # None: the driver's
    print(f"  {label} work queues of the evaluated kernels' contexts:", dict(queues))
    after = gate.snapshot()
    owned = {k: v - before.by_purpose.get(k, 0.0) for k, v in after.by_purpose.items()}
    eval_s = [r.eval_s for r in records if r.eval_s is not None]
    busy = sampler.busy_s if sampler.process is not None else float("nan")
    for name, value in verifier.compile_by_size().items():
        print(f"  {label}: {name:52s} {value:8.2f}")
    for name, value in copy_agreement(records).items():
        print(f"  {label}: {name:52s} {value:8.3f}")
    rates = {f"{label}: kernels": len(records), f"{label}: tasks": tasks, f"{label}: wall s": wall,
             f"{label}: first record after s": first or float("nan"),
             f"{label}: first evaluated record after s": first_evaluated or float("nan"),
             f"{label}: VERIFIED KERNELS/HOUR": len(records) / wall * 3600,
             f"{label}: kernels/hour after the first evaluated record":
                 (len(records) - evaluated_at) / max(1e-9, wall - (first_evaluated or wall)) * 3600,
             f"{label}: kernels/hour from the 25 % to the 75 % record": middle_rate(times)}  # fmt: skip
    if verifier.engine_devices:  # builds, gates, references and baselines live in the engines' own processes
        print(f"  {label}: {len(verifier.engine_devices)} engine processes: each one's device, references and "
              "baselines from its totals (an engine stopped before its stream's end: until then); no compile figures")  # fmt: skip
        for name, totals in sorted(phase_log.engines.items()):
            for line in engine_lines(totals, started):
                print(f"  {label}: {name}: {line}")
        return {
            **rates,
            f"{label}: GPU-busy s/kernel (all GPUs)": busy / n,
            f"{label}: one engine alone at the end s": alone_at_the_end(list(phase_log.engines.values())),
            f"{label}: pairs handed back at the end": sum(phase_log.handed_back),
            f"{label}: hand-backs at the end": len(phase_log.handed_back),
        }
    return {**rates, f"{label}: compile core-s/kernel": sum(verifier.builds.values()) / n,
            f"{label}: GPU-busy s/kernel": busy / n, f"{label}: GPU-idle s/kernel": (wall - busy) / n,
            f"{label}: evaluation child wall s/kernel (mean)": statistics.mean(eval_s) if eval_s else float("nan"),
            f"{label}: timing windows s/kernel": owned.get("timing", 0.0) / n,
            f"{label}: ncu turns s/kernel": owned.get("ncu", 0.0) / n,
            f"{label}: owners waiting (for checks or another owner) s/kernel":
                (after.owner_wait_s - before.owner_wait_s) / n,
            f"{label}: device unowned while an owner waited for checks s/kernel": (after.drain_s - before.drain_s) / n,
            f"{label}: device held by nobody s/kernel": (after.unheld_s - before.unheld_s) / n,
            f"{label}: device held shared only (checks, references) s/kernel": (after.shared_s - before.shared_s) / n,
            f"{label}: device held by nobody before the first evaluated record s":
                (at_first_evaluated or after).unheld_s - before.unheld_s,
            f"{label}: checks yielded to a window per kernel": (after.yields - before.yields) / n,
            f"{label}: stopping and continuing members (in windows) ms/kernel":
                (after.stopping_s - before.stopping_s) / n * 1000,
            f"{label}: clean references computed per task": verifier.references.computed / tasks,
            f"{label}: clean reference s/task": verifier.references.compute_s / tasks,
            f"{label}: children that waited for room on the scratch disk": verifier.references.room.waits,
            f"{label}: waiting for room on the scratch disk s": verifier.references.room.waited_s,
            f"{label}: measured baselines s/task": owned.get("baseline", 0.0) / tasks,
            f"{label}: baseline children wall s (mean)":
                statistics.mean(verifier.baselines.children_s) if verifier.baselines.children_s else float("nan"),
            f"{label}: wall s/kernel not in a timing window or baseline":
                (wall - owned.get("timing", 0.0) - owned.get("baseline", 0.0)) / n}  # fmt: skip


def main() -> None:
    parser = throughput_arguments(__doc__.splitlines()[0])
    args = parser.parse_args()
    refill_late = False if args.refill_at_once else config.EVAL_REFILL_AFTER_FIRST_REFERENCE
    # Options, not the config: an engine process per GPU reads its own config.
    fork_children = None if args.child_start is None else args.child_start == "fork"
    forks = config.FORK_EVALUATION_CHILDREN if fork_children is None else fork_children
    if args.judge_poll_max is not None:  # the watchers live in this process: compare their back-off with none
        if args.judge_poll_max < config.JUDGE_POLL_S:
            parser.error(f"--judge-poll-max: at least {config.JUDGE_POLL_S} s, not {args.judge_poll_max}")
        config.JUDGE_POLL_MAX_S = args.judge_poll_max
    backend = args.backend or ("cuda" if environment.gpu_count() else "cpu")
    count = args.kernels or (96 if backend == "cuda" else 4)
    try:
        settings = [int(v) for v in args.eval_workers.split(",")] if args.eval_workers else [None]
    except ValueError:
        parser.error(f"--eval-workers: a comma-separated list of integers, not {args.eval_workers!r}")
    places = {}
    for option, text in (("--warm-gpus", args.warm_gpus), ("--cold-gpus", args.cold_gpus)):
        try:
            places[option] = parse_places(text)
        except ValueError:
            parser.error(f"{option}: comma-separated GPU counts of 1 or more, each with @cores per GPU or not, "
                         f"not {text!r}")  # fmt: skip
    warm_gpus, cold_gpus = places["--warm-gpus"], places["--cold-gpus"]
    if cold_gpus and (warm_gpus or settings != [None] or backend != "cuda"):
        parser.error("--cold-gpus: on the cuda backend, without --warm-gpus or --eval-workers")
    try:
        reserves = [int(v) for v in args.device_reserve.split(",")] if args.device_reserve else [None]
    except ValueError:
        parser.error(f"--device-reserve: a comma-separated list of byte counts, not {args.device_reserve!r}")
    if any(n is not None and n < 0 for n in reserves):
        parser.error(f"--device-reserve: byte counts of 0 or more, not {args.device_reserve!r}")
    try:
        values = args.device_connections.split(",") if args.device_connections else []
        counts = [int(v) for v in values if v != "default"]
    except ValueError:
        parser.error(f"--device-connections: 'default' or counts, comma-separated, not {args.device_connections!r}")
    if any(n < 1 for n in counts):
        parser.error(f"--device-connections: counts of 1 or more, not {args.device_connections!r}")
    connections = [work_queues.DRIVER_DEFAULT if v == "default" else int(v) for v in values] or [None]
    if args.compile_workers is not None and args.compile_workers < 1:
        parser.error(f"--compile-workers: 1 or more, not {args.compile_workers}")
    if args.kernelbench < 0:
        parser.error(f"--kernelbench: 0 or more kernels, not {args.kernelbench}")
    if args.first_batch < 1:
        parser.error(f"--first-batch: 1 or more, not {args.first_batch}")
    if args.warm_repeat < 1:
        parser.error(f"--warm-repeat: 1 or more, not {args.warm_repeat}")
    if warm_gpus and backend != "cuda":
        parser.error(f"--warm-gpus: on the cuda backend, not {backend}")
    if args.nvcc_in_series:
        config.NVCC_FRONT_ENDS_SIDE_BY_SIDE = False
    if not 0 <= args.later_builds_nice <= 19:
        parser.error(f"--later-builds-nice: 0 to 19, not {args.later_builds_nice}")
    config.COMPILE_LATER_BUILDS_NICE = args.later_builds_nice
    if args.urgent_builds is not None and args.urgent_builds < 0:
        parser.error(f"--urgent-builds: 0 or more, not {args.urgent_builds}")
    urgent_text = (
        args.urgent_builds
        if args.urgent_builds is not None
        else (f"{config.urgent_builds_for(1)} (one GPU) or {config.urgent_builds_for(2)} (several GPUs)")
    )
    env = environment.environment_fields(backend)
    print(f"machine: {platform.node()} {os.cpu_count()} cores, {env['gpu_name']}, torch {env['torch_version']}, "
          f"cuda {env['cuda_version']}, nvcc {env['nvcc_version']}, isolation {resolve_isolation()}, evaluation "
          f"children {'forked' if forks else 'exec-d'}, clean references "
          f"{'forked' if args.fork_references or config.FORK_REFERENCE_CHILDREN else 'exec-d'}, spare children "
          f"{'after the first reference' if refill_late else 'at once'}, nvcc's front ends "
          f"{'side by side' if config.NVCC_FRONT_ENDS_SIDE_BY_SIDE else 'in series'} for a stream's first "
          f"{urgent_text} builds, its later builds at niceness "
          f"{config.COMPILE_LATER_BUILDS_NICE}")  # fmt: skip
    print(f"cores: {smt_line()}")
    started = time.perf_counter()
    bytecode = bytecode_cache.for_child(resolve_isolation(), [])  # warmed once per environment, not per run
    print(f"children's byte code: {bytecode or 'none (children compile their own)'}, ready after "
          f"{time.perf_counter() - started:.1f} s")  # fmt: skip
    # Each stage prints as it ends: a run cut short by a time limit still reports what it measured; SIGTERM (as
    # `timeout` sends) ends the stream in progress with its figures and skips the stages after it.
    signal.signal(signal.SIGTERM, cut_short)

    def cold_options(workers: int | None = None, cores: int | None = None, gpus: int = 1) -> VerifyOptions:
        """A cold pass's options: empty caches; compile workers by the config's rule for the pass's `cores` and
        `gpus` (a place's), else the engine's (None)."""
        work = Path(tempfile.mkdtemp(prefix="ka-bench-"))
        compile_workers = args.compile_workers or (config.compile_workers_for(cores, gpus) if cores else None)
        return VerifyOptions(backend=backend, build_cache_dir=work / "builds", baseline_cache_dir=work / "baselines",
                             trials=config.DEFAULT_TRIALS, eval_workers=workers, profile=args.profile,
                             compile_workers=compile_workers, first_batch_size=args.first_batch,
                             urgent_builds=args.urgent_builds,
                             engines=args.engines, fork_children=fork_children,
                             fork_references=True if args.fork_references else None,
                             refill_after_first_reference=refill_late)  # fmt: skip

    if cold_gpus:
        measure_cold(count, args.tasks, cold_options, cold_gpus, args.records)
        return
    # The headline figure first: kernels/hour through the whole engine, cold caches for every setting; then whether
    # each later setting's pass judged the kernels as the first one did.
    passes: list[tuple[str, list]] = []
    for workers in settings:
        options = cold_options(workers)
        pairs = corpus(backend, count, args.tasks)
        label = f"eval workers/device {workers or 'default'}{', profiles on' if args.profile else ''}"
        print(f"{label}: {count} kernels over {len({t.id for _, t in pairs})} tasks, compile workers "
              f"{options.compile_workers or 'by the config'}, batch size {options.batch_size} (the first "
              f"{options.first_batch_size})", flush=True)  # fmt: skip
        passes.append((f"pass {len(passes) + 1} ({label})", []))
        figures = measure_stream(pairs, options, label, args.records, passes[-1][1])
        show(figures)
        if CUT_SHORT.is_set():
            return
        if len(passes) == 1 and backend == "cuda" and args.kernelbench:  # the same kernels through KernelBench's flow
            for line in side_by_side(pairs, passes[0][1], figures[f"{label}: VERIFIED KERNELS/HOUR"], args.kernelbench,
                                     options.compile_workers or config.compile_workers_for(len(os.sched_getaffinity(0))),
                                     Path(tempfile.mkdtemp(prefix="ka-bench-kernelbench-"))):  # fmt: skip
                print(line, flush=True)
    for name, records in passes[1:]:
        for figure, value in pass_agreement(passes[0][1], records).items():
            print(f"{name} against pass 1: {figure:40s} {value:8.1f}", flush=True)
    if warm_gpus:
        repeated = repeat_pairs(pairs, args.warm_repeat)
        for reserve, queues in itertools.product(reserves, connections):
            variant = replace(options, device_reserve_bytes=reserve, device_connections=queues)
            measure_warm(repeated, variant, warm_gpus, args.records)
            if CUT_SHORT.is_set():
                return
    options = VerifyOptions(backend=backend, trials=config.DEFAULT_TRIALS,
                            build_cache_dir=Path(tempfile.mkdtemp(prefix="ka-bench-builds-")))  # fmt: skip
    pairs = corpus(backend, max(options.batch_size, 1), args.tasks)
    if "startup" not in args.skip:
        show(measure_startup(pairs, options))
    if "compile" not in args.skip:
        show(measure_compile(pairs[: options.batch_size], options))


def measure_warm(pairs, options: VerifyOptions, places: list[Place], records_path: Path | None) -> None:
    """The last run's kernels again, each build now a cache hit, with baselines measured afresh: the rate the
    evaluation side makes on 1, 2, ... of the visible GPUs (the engine puts its workers on every visible GPU), each
    on all of the bench's cores or on some per GPU."""
    visible, own = environment.visible_gpu_ids(), sorted(os.sched_getaffinity(0))
    rates: dict[tuple[int, int], dict[str, float]] = {}
    variant = (
        "" if options.device_reserve_bytes is None else f", device reserve {options.device_reserve_bytes >> 20} MiB"
    ) + (
        "" if options.device_connections is None else f", {work_queues.queues(options) or 'default'} device connections"
    )
    for place in places_that_fit(places, visible, own, "warm compile cache"):
        with on_place(place, visible, own) as cores:
            warm = replace(options, baseline_cache_dir=Path(tempfile.mkdtemp(prefix="ka-bench-baselines-")))
            label = f"warm compile cache, {place_name(place, visible, cores)}{variant}"
            print(f"{label}: {len(pairs)} kernels", flush=True)
            figures = measure_stream(pairs, warm, label, records_path)
        show(figures)
        if CUT_SHORT.is_set():  # a run cut short is no figure to scale by
            return
        rates[(place.gpus, len(cores))] = {name.removeprefix(f"{label}: "): value for name, value in figures.items()}
    for line in scaling_lines(rates):
        print(f"warm compile cache{variant}: {line}", flush=True)


def measure_cold(count: int, task_count: int, make_options, places: list[Place], records_path: Path | None) -> None:
    """The same mix from an empty compile cache on each place in turn (each pass its own copies of the kernels, so
    nothing is served from an earlier pass's cache), then how the passes on several GPUs scale against the one-GPU
    pass and whether they agree with it kernel by kernel."""
    visible, own = environment.visible_gpu_ids(), sorted(os.sched_getaffinity(0))
    rates: dict[tuple[int, int], dict[str, float]] = {}
    passes: dict[tuple[int, int], list] = {}
    for place in places_that_fit(places, visible, own, "cold"):
        with on_place(place, visible, own) as cores:
            options = make_options(cores=len(cores), gpus=place.gpus)
            label = f"cold, {place_name(place, visible, cores)}"
            print(f"{label}: {count} kernels, compile workers {options.compile_workers}", flush=True)
            records: list = []
            figures = measure_stream(corpus(options.backend, count, task_count), options, label, records_path, records)
        show(figures)
        key = (place.gpus, len(cores))
        passes[key] = records
        if CUT_SHORT.is_set():
            break
        rates[key] = {name.removeprefix(f"{label}: "): value for name, value in figures.items()}
    for line in scaling_lines(rates):
        print(f"cold: {line}", flush=True)
    for (gpus, cores), records in sorted(passes.items()):
        for (one_gpus, one_cores), one in sorted(passes.items()):
            if gpus > 1 and one_gpus == 1:
                for name, value in pass_agreement(one, records).items():
                    print(f"cold: {gpus} GPUs on {cores} cores against 1 on {one_cores}: {name:40s} {value:8.1f}")


if __name__ == "__main__":
    main()
