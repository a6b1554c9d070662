"""KernelBench's own evaluation flow over the throughput bench's kernels, where KernelBench is importable: its
compile-cache pool first, then a spawned process a kernel, one at a time on the GPU. The bench prints its rate
beside this engine's (`bench_verify_throughput.py --kernelbench N`).

KernelBench is found as the package `kernelbench` (installed, or under `src/` of a checkout named by
$KA_KERNELBENCH_DIR) or as a checkout's older `src` package; either must offer `build_compile_cache` and
`eval_kernel_against_ref` in its `eval` module, called by their parameters' names. Its code runs unsandboxed in
these processes, as it runs for its users: the bundled kernels only.

A bundled `.cu` kernel becomes a KernelBench `ModelNew` source: the task's own source (its `Model`, inputs and
init inputs), the kernel built by `load_inline` when the source runs (as KernelBench's sources build theirs), and a
`ModelNew` that is the task's `Model` with its `forward` passing the kernel's `forward` as `fn`: the same
parameters, drawn the same way, as the contract of the task suite defines them.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

KERNELBENCH_DIR_ENV = "KA_KERNELBENCH_DIR"
EVAL_MODULES = ("kernelbench.eval", "src.eval")  # installed package; a checkout's own layout
SEED = 42  # KernelBench's default seed_num
CORRECT_TRIALS, PERF_TRIALS = 5, 100  # as many as this engine's default trials and timed calls
KERNEL_TIMEOUT_S = 300.0  # one kernel's evaluation process, past which it is stopped and counted as failed
# What KernelBench's result metadata says of a kernel it did not pass, kept as the verdict's `why`
WHY_KEYS = ("compilation_error", "runtime_error", "correctness_issue", "max_difference", "avg_difference")
WHY_CHARS = 300

MODEL_NEW = '''

# --- the kernel under test, for KernelBench: built when this source runs, as its ModelNew sources build theirs ---
from torch.utils.cpp_extension import load_inline as _ka_load_inline

_ka_extension = _ka_load_inline(name={name!r}, cpp_sources={cpp!r}, cuda_sources={cuda!r}, verbose=False)


class ModelNew(Model):
    """The task's Model with the kernel's `forward` as its function: the same parameters, drawn the same way."""

    def forward(self, *inputs):
        return Model.forward(self, *inputs, fn=_ka_extension.forward)
'''


@dataclass
class FlowResult:
    """What KernelBench's flow made of the kernels: per kernel name, compiled / correct / its runtime or why not."""

    kernels: int
    wall_s: float
    verdicts: dict[str, dict] = field(default_factory=dict)

    @property
    def per_hour(self) -> float:
        return self.kernels / self.wall_s * 3600 if self.wall_s > 0 else float("nan")

    def count(self, key: str) -> int:
        return sum(1 for verdict in self.verdicts.values() if verdict.get(key))


def _on_path() -> None:
    """A checkout named by $KA_KERNELBENCH_DIR on the import path: its root (`src.eval`) and its `src` (`kernelbench`)."""
    root = os.environ.get(KERNELBENCH_DIR_ENV)
    for folder in (root, os.path.join(root, "src")) if root else ():
        if folder not in sys.path:
            sys.path.insert(0, folder)


def find_eval_module() -> str | None:
    """The name of KernelBench's importable `eval` module, or None where there is none."""
    _on_path()
    for name in EVAL_MODULES:
        try:
            module = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - not there, or its own imports (LLM clients, say) missing here
            continue
        if callable(getattr(module, "build_compile_cache", None)) and callable(
            getattr(module, "eval_kernel_against_ref", None)
        ):
            return name
    return None


def model_new_source(task_source: str, kernel_source: str, language: str, name: str) -> str:
    """A KernelBench `ModelNew` source for one bundled kernel (`cuda`: a `.cu`; `cpp`: a CPU `.cpp`)."""
    extension = re.sub(r"\W", "_", name)
    cpp, cuda = ([""], [kernel_source]) if language == "cuda" else ([kernel_source], None)
    return task_source + MODEL_NEW.format(name=f"ka_kernelbench_{extension}", cpp=cpp, cuda=cuda)


def run_flow(kernels: list[tuple[str, str, str]], module_name: str, compile_workers: int, work_dir: Path,
             device: str = "cuda:0", timeout_s: float = KERNEL_TIMEOUT_S) -> FlowResult:  # fmt: skip
    """KernelBench's flow over `kernels` ((name, reference source, ModelNew source) each): every source compiled
    into its own build folder on a pool of `compile_workers` processes, then each kernel evaluated in a process of
    its own, one after another, against that folder."""
    spawn = multiprocessing.get_context("spawn")  # KernelBench's: a CUDA context is never forked
    folders = [work_dir / f"kernel-{index}" for index in range(len(kernels))]
    started = time.monotonic()
    with spawn.Pool(max(1, compile_workers)) as pool:
        compiled = pool.starmap(_compile, [(module_name, source, str(folder))
                                           for (_, _, source), folder in zip(kernels, folders, strict=True)])  # fmt: skip
    verdicts: dict[str, dict] = {}
    for (name, reference, source), folder, built in zip(kernels, folders, compiled, strict=True):
        pool = spawn.Pool(1)
        try:
            pending = pool.apply_async(_evaluate, (module_name, reference, source, str(folder), device))
            verdicts[name] = pending.get(timeout=timeout_s)
        except multiprocessing.TimeoutError:
            verdicts[name] = {"compiled": built, "correct": False, "why": f"timed out after {timeout_s:.0f} s"}
        except Exception as exc:  # noqa: BLE001 - the process died: the kernel's failure, as KernelBench counts it
            verdicts[name] = {"compiled": built, "correct": False, "why": f"{type(exc).__name__}: {exc}"[:300]}
        finally:
            pool.terminate()
            pool.join()
    return FlowResult(kernels=len(kernels), wall_s=time.monotonic() - started, verdicts=verdicts)


def _kernelbench(module_name: str):
    _on_path()
    return importlib.import_module(module_name)


def _compile(module_name: str, source: str, build_dir: str) -> bool:
    """One source into its build folder, as KernelBench's compile pool does; whether it built."""
    try:
        outcome = _kernelbench(module_name).build_compile_cache(source, verbose=False, build_dir=build_dir)
    except Exception:  # noqa: BLE001 - a compile error is the kernel's
        return False
    return bool(outcome[0] if isinstance(outcome, tuple) else outcome)


def _evaluate(module_name: str, reference: str, source: str, build_dir: str, device: str) -> dict:
    """One kernel checked and timed by KernelBench in this (spawned) process."""
    import torch

    result = _kernelbench(module_name).eval_kernel_against_ref(
        reference, source, seed_num=SEED, num_correct_trials=CORRECT_TRIALS, num_perf_trials=PERF_TRIALS,
        verbose=False, measure_performance=True, build_dir=build_dir, device=torch.device(device),
    )  # fmt: skip
    if result is None:  # KernelBench's answer where the build folder was busy (lock): no verdict
        return {"compiled": False, "correct": False, "why": "no result"}
    verdict = {"compiled": bool(getattr(result, "compiled", False)),
               "correct": bool(getattr(result, "correctness", False)), "runtime_ms": getattr(result, "runtime", None)}  # fmt: skip
    why = _why(getattr(result, "metadata", None))
    if why and not verdict["correct"]:
        verdict["why"] = why
    return verdict


def _why(metadata) -> str:
    """KernelBench's own reasons for a verdict, from its result's metadata (its keys; values as text)."""
    if not isinstance(metadata, dict):
        return ""
    return "; ".join(f"{key}: {metadata[key]}" for key in WHY_KEYS if key in metadata)[:WHY_CHARS]


def side_by_side(pairs, records, engine_per_hour: float, count: int, compile_workers: int, work_dir: Path) -> list[str]:
    """KernelBench's flow over the first `count` CUDA kernels of `pairs` (the bench's mix, judged by this engine in
    `records` at `engine_per_hour` from the start), as lines to print: both rates, and where the verdicts differ."""
    module_name = find_eval_module()
    if module_name is None:
        return [
            f"KernelBench: not importable (no `kernelbench`, nor `src` under ${KERNELBENCH_DIR_ENV}); its flow not run"
        ]
    chosen = [(candidate, task) for candidate, task in pairs if candidate.language == "cuda"][:count]
    kernels = [(candidate.kernel_name, task.source,
                model_new_source(task.source, candidate.source, candidate.language, candidate.kernel_name))
               for candidate, task in chosen]  # fmt: skip
    flow = run_flow(kernels, module_name, compile_workers, work_dir)
    ours = {record.kernel_name: record.status == "correct" for record in records}
    differ = sorted(
        name for name, verdict in flow.verdicts.items() if name in ours and ours[name] != verdict["correct"]
    )
    ratio = engine_per_hour / flow.per_hour if flow.per_hour > 0 else float("nan")
    lines = [f"KernelBench's own flow ({module_name}): {flow.per_hour:,.0f} kernels/h over the first {flow.kernels} "
             f"of the same kernels in {flow.wall_s:.1f} s ({flow.count('compiled')} compiled, {flow.count('correct')} "
             f"correct); this engine {engine_per_hour:,.0f}/h from the start: {ratio:.1f}x",
             f"KernelBench's own flow: correct or not as this engine judged them: "
             f"{len(flow.verdicts) - len(differ)} of {len(flow.verdicts)}"]  # fmt: skip
    lines += [f"KernelBench's own flow: {name}: {flow.verdicts[name]}" for name in differ]
    return lines
