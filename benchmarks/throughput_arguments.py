"""The throughput bench's command line (`bench_verify_throughput.py`): every option, its default from the config."""

from __future__ import annotations

import argparse
from pathlib import Path

from builder import config


def throughput_arguments(description: str) -> argparse.ArgumentParser:
    """The bench's options; `bench_verify_throughput.main` checks their values."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--kernels", type=int, default=None, help="distinct kernels (default 96 cuda / 4 cpu)")
    parser.add_argument("--tasks", type=int, default=16, help="tasks they are spread over, all levels (default 16)")
    parser.add_argument("--backend", choices=("cuda", "cpu"), default=None)
    parser.add_argument("--kernelbench", type=int, default=32, metavar="N",
                        help="on cuda, the first N kernels again through KernelBench's own flow where it is importable "
                             "(kernelbench_flow.py), its rate beside this engine's (0: not)")  # fmt: skip
    parser.add_argument("--eval-workers", default=None,
                        help="evaluation workers per device to compare, e.g. 1,4 (default: the config's)")  # fmt: skip
    parser.add_argument("--skip", default="", help="stages to skip: startup,compile")
    parser.add_argument(
        "--compile-workers",
        type=int,
        default=None,
        help="parallel compile children (default: config.compile_workers_for the pass's cores and GPUs)",
    )
    parser.add_argument("--first-batch", type=int, default=config.COMPILE_FIRST_BATCH_SIZE,
                        help="candidates in a stream's first shared build, the ramp's start "
                             f"(default {config.COMPILE_FIRST_BATCH_SIZE})")  # fmt: skip
    parser.add_argument("--nvcc-in-series", action="store_true",
                        help="nvcc's steps one after another, as nvcc runs them, not its two front ends side by side "
                             "(the config's NVCC_FRONT_ENDS_SIDE_BY_SIDE; engines in this process)")  # fmt: skip
    parser.add_argument("--later-builds-nice", type=int, default=config.COMPILE_LATER_BUILDS_NICE,
                        help="the niceness of a stream's builds after its first (the config's "
                             f"COMPILE_LATER_BUILDS_NICE, default {config.COMPILE_LATER_BUILDS_NICE}; 0: the usual)")  # fmt: skip
    parser.add_argument("--urgent-builds", type=int, default=None,
                        help="builds of a stream's first window that are urgent: front ends side by side, the "
                             f"usual priority (default: the config's rule, {config.urgent_builds_for(1)} on one GPU, "
                             f"{config.urgent_builds_for(2)} on several)")  # fmt: skip
    parser.add_argument("--records", type=Path, default=None, help="append each run's records here, JSON lines")
    parser.add_argument("--profile", action="store_true", help="profiles on (ncu, torch profiler, clang-tidy)")
    longest = config.JUDGE_POLL_MAX_S
    parser.add_argument("--judge-poll-max", type=float, default=None,
                        help=f"the watchers' longest wait between looks, s (default {longest})")  # fmt: skip
    parser.add_argument("--engines", type=int, default=None,
                        help="engine processes (default: one per GPU where several are visible)")  # fmt: skip
    parser.add_argument("--warm-gpus", default="",
                        help="then the same kernels again on the builds the run left (an evaluation-bound mix), "
                             "on the first N visible GPUs for each N, each N@C on C of the cores per GPU, "
                             "e.g. 1@16,2,1")  # fmt: skip
    parser.add_argument("--cold-gpus", default="",
                        help="instead of one cold pass on every visible GPU, one on the first N visible GPUs for each "
                             "N (N@C: on C of the cores per GPU), each from an empty compile cache, then how they "
                             "scale against the one-GPU pass and agree with it, e.g. 1,4")  # fmt: skip
    parser.add_argument("--child-start", choices=("fork", "exec"), default=None,
                        help="pre-started evaluation children forked from a zygote, or exec'd (default: the config's, "
                             f"{'fork' if config.FORK_EVALUATION_CHILDREN else 'exec'})")  # fmt: skip
    parser.add_argument("--fork-references", action="store_true",
                        help="clean reference children forked from the evaluation children's zygote once it is up "
                             f"(default: the config's, {'forked' if config.FORK_REFERENCE_CHILDREN else 'exec-d'})")  # fmt: skip
    parser.add_argument("--device-reserve", default="",
                        help="bytes each evaluation child takes from the driver before its job, for the warm runs "
                             "to compare, e.g. 0,2147483648 (default: the config's, "
                             f"{config.EVAL_DEVICE_RESERVE_BYTES})")  # fmt: skip
    parser.add_argument("--device-connections", default="",
                        help="CUDA_DEVICE_MAX_CONNECTIONS of the candidates' children for the warm runs to compare, "
                             "'default' for the driver's, e.g. default,2: fewer work queues make a CUDA context "
                             f"cheaper (default: the config's, {config.EVAL_DEVICE_CONNECTIONS})")  # fmt: skip
    parser.add_argument("--refill-at-once", action="store_true",
                        help="a taken evaluation child's replacement starts at once, not after the build's first "
                             "clean reference (default: the config's, "
                             f"{'after' if config.EVAL_REFILL_AFTER_FIRST_REFERENCE else 'at once'})")  # fmt: skip
    parser.add_argument("--warm-repeat", type=int, default=1,
                        help="the warm runs evaluate each kernel this many times (its build a cache hit each time): "
                             "more candidates per task, as a long build has, without more compiles (default 1)")  # fmt: skip
    return parser
