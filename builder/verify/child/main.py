"""Untrusted-side entry point: evaluate one candidate in a sandboxed, single-use process.

    python -m builder.verify.child.main JOB.json
    python -m builder.verify.child.main -        # pre-started: imports torch and initialises CUDA first,
                                            # then reads the job path from one line of stdin

The job JSON (docs/architecture.md) names the task file, the compiled extension or ModelNew file, the
secret seeds, tolerances and timing counts. The result JSON is written atomically to `result_path`;
when this process dies before that (segfault, illegal address that kills the context, timeout), the
parent finds no result and records a crash. Modes: "reference" (the clean reference child: the task's
outputs, never candidate code), "evaluate" (the candidate's outputs for the parent to judge, then a timing
window the parent referees once it says they passed: `child/window.py`), "baseline" (eager and torch.compile of the task), "ncu" (the candidate's calls
inside an NVTX range for Nsight Compute).

Result fields beyond docs/architecture.md (additions only): `error_origin` ("candidate", "task" or
"child": who failed), `flag_notes` (flag -> why), `op_census` (the torch-op shares behind
own_kernel_fraction), `mode`, `child_s`; baseline mode adds `eager_runtime`, `compile_runtime` (full
stats), `compile_error`, `compile_mode`; ncu mode `profiled_calls`.
"""

from __future__ import annotations

import gc
import importlib.machinery
import importlib.util
import json
import os
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from builder.verify.child import words as child_words
from builder.verify.child.phases import EvaluationPhases

CANDIDATE_MODULE_NAME = "ka_candidate_model_new"
_GUARD: list[Any] = [None]  # the evaluation's VerifierGuard, for the last check before the result is written


def load_extension_forward(library_path: str, module_name: str, symbol: str = "forward") -> Any:
    """Import a compiled extension by path and return `symbol` ("forward" or "c3.forward")."""
    loader = importlib.machinery.ExtensionFileLoader(module_name, library_path)
    spec = importlib.util.spec_from_file_location(module_name, library_path, loader=loader)
    if spec is None:
        raise ImportError(f"cannot load extension {library_path}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    target: Any = module
    for part in symbol.split("."):
        target = getattr(target, part)
    return target


def load_model_new(python_path: str) -> type:
    spec = importlib.util.spec_from_file_location(CANDIDATE_MODULE_NAME, python_path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {python_path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[CANDIDATE_MODULE_NAME] = module
    spec.loader.exec_module(module)
    model_class = getattr(module, "ModelNew", None)
    if not isinstance(model_class, type):
        raise ImportError(f"{Path(python_path).name} defines no ModelNew class")
    return model_class


def _load_task(job: dict[str, Any]) -> Any:
    from builder.tasks import load_task_module
    from builder.tasks.suite import describe_task_file

    task = describe_task_file(Path(job["task_path"]))
    return load_task_module(task, size=job.get("task_size") or "full")


def _load_binding(job: dict[str, Any]) -> Any:
    from builder.verify.child.checks import FunctionalBinding, ModelNewBinding

    if job.get("language") == "python" or (job.get("python_path") and not job.get("library_path")):
        return ModelNewBinding(load_model_new(job["python_path"]))
    forward = load_extension_forward(job["library_path"], job["module_name"], job.get("symbol") or "forward")
    return FunctionalBinding(forward)


def _failure(status: str, error: str, origin: str) -> dict[str, Any]:
    return {"status": status, "flags": [], "error": error, "error_origin": origin, "trials": 0}


def run_reference_job(job: dict[str, Any]) -> dict[str, Any]:
    """The clean reference child: loads the task and nothing else, writes every reference output."""
    from builder.verify.child.reference import compute_reference
    from builder.verify.protocol import tensor_files

    task_module = _load_task(job)
    child_words.await_turn(job, "go_path")  # the device is shared with checks, never with a timing window
    bundle = compute_reference(task_module, job)
    if bundle.manifest.get("error"):
        return {**_failure("runtime_error", bundle.manifest["error"], "task"), "manifest": bundle.manifest}
    tensor_files.write_dir(job["outputs_dir"], bundle.outputs)
    return {"status": "correct", "flags": [], "error": None, "manifest": bundle.manifest}


def run_evaluate(job: dict[str, Any]) -> dict[str, Any]:
    phases = EvaluationPhases(job.get("handed_over_at"))
    result = _evaluate(job, phases)
    result["phase_s"] = phases.finish()
    return result


def _evaluate(job: dict[str, Any], phases: EvaluationPhases) -> dict[str, Any]:
    from builder.verify.child import tamper
    from builder.verify.child.checks import run_candidate_side
    from builder.verify.child.failures import exception_text
    from builder.verify.child.timing import prepare_timing
    from builder.verify.child.window import bytes_tensor, serve_refereed_window
    from builder.verify.protocol import tensor_files
    from schemas import disqualifying_flags

    manifest = job.get("reference")
    if not isinstance(manifest, dict) or manifest.get("error"):
        return _failure("runtime_error", "the job carries no clean reference manifest", "child")
    try:
        task_module = _load_task(job)
    except Exception as exc:  # noqa: BLE001
        return _failure("runtime_error", f"task failed to load: {exception_text(exc)}", "task")
    before = tamper.fingerprint(task_module)
    guard = _GUARD[0] = tamper.VerifierGuard(job)
    phases.done("load_task_and_fingerprint")
    # The checks may share the device with other candidates' checks, never with a timing window; candidate code
    # loads only after the grant.
    child_words.await_turn(job, "checks_go_path")
    phases.done("wait_for_checks")
    try:
        binding = _load_binding(job)
    except SyntaxError as exc:
        return _failure("compile_error", f"candidate does not parse: {exception_text(exc)}", "candidate")
    except Exception as exc:  # noqa: BLE001 - untrusted module code runs on import
        return _failure("runtime_error", f"candidate failed to load: {exception_text(exc)}", "candidate")
    phases.done("load_candidate")
    guard.check("after the candidate loaded")
    yield_point = child_words.YieldPoint(job)

    def between_steps() -> None:
        guard.maybe_check("between two steps of the checks")
        yield_point()

    run = run_candidate_side(binding, task_module, job, manifest, between_steps=between_steps)
    if guard.check("after the checks"):
        run.flag("tampers_verifier", guard.found or "")
    phases.done("checks")
    phases.seconds["checks_yielded_to_timing"] = round(yield_point.waited_s, 4)  # within "checks"
    phases.seconds.update(run.step_s)  # "checks" by kind of step, "checks_yielded_to_timing" not included
    result = run.result()
    device = "cuda" if job.get("backend") == "cuda" else "cpu"
    wants_timing = result["status"] == "correct" and not set(result["flags"]) & disqualifying_flags()
    prepared, prepare_error, first_outputs = None, None, None
    if wants_timing:  # built and first called while the device is still shared: the window holds timing alone
        try:
            yield_point()
            prepared = prepare_timing(binding, task_module, job, device, between_steps=yield_point)
            first_outputs = tensor_files.pack_each(prepared.first_outputs())  # to the host, outside the window
        except Exception as exc:  # noqa: BLE001 - candidate code runs in bind and warm-up; reported if it is timed
            prepare_error = exception_text(exc)
        phases.done("prepare_timing")
        if device == "cuda":  # 1 where the outputs' digests are hashed on the device, 0 on the host (the same digest)
            from builder.verify.protocol.output_digest import COMPILED_BEFORE_USE, device_kernel

            phases.seconds["digest_on_device"] = float(device_kernel() is not None)
            phases.seconds["digest_kernel_compiled_before_job"] = float(any(COMPILED_BEFORE_USE))
    # The checks' own findings travel with their outputs too, written by another writer than the result's: the
    # parent keeps every flag either names.
    claims = json.dumps({"flags": sorted(run.flags), "notes": run.notes,
                         "own_kernel_fraction": run.census.get("own_kernel_fraction")}, default=str)  # fmt: skip
    run.outputs["claims"] = bytes_tensor(claims.encode())
    packed = tensor_files.pack_each(run.outputs)  # the last device work of the checks: copies to the host
    child_words.say(job, "checks_done_path", "done")  # the parent may end this child's shared hold: files are host
    phases.done("copy_outputs")
    # The checks' outputs go to the judge first: the parent compares them while this process writes the timing
    # sets' first outputs and walks torch's surface again.
    tensor_files.write_dir(job["outputs_dir"], packed, packed=True)
    del packed
    phases.done("write_outputs")
    if first_outputs is not None:
        try:
            tensor_files.write_dir(job["timing_outputs_dir"], first_outputs, packed=True)
        except Exception as exc:  # noqa: BLE001 - reported if it is timed, as a failed preparation is
            prepare_error = exception_text(exc)
    # torch's surface after the candidate's checks and its timing sets' first calls: a walk on the host (about
    # half a second) that neither a window waiting for the shared hold nor the judge waits for. A candidate it
    # flags is not timed, whatever the judge found.
    if changed := tamper.changes(before, tamper.fingerprint(task_module)):
        run.flag("tampers_reference", "; ".join(changed))
        result, wants_timing = run.result(), False
    phases.done("fingerprint_after")
    if not wants_timing:
        return result
    timing_granted = child_words.await_judgement(job)
    phases.done("wait_for_judgement_and_device")
    if not timing_granted:
        return result
    if prepare_error is not None:
        result.update(status="runtime_error", error=f"while timing: {prepare_error}", error_origin="candidate")
        return result
    try:
        run.time_side_stream()  # compares clocks: only now that the device is this candidate's alone
    except Exception as exc:  # noqa: BLE001 - the candidate raised on this call
        result.update(status="runtime_error", error=f"while timing: {exception_text(exc)}", error_origin="candidate")
        return result
    if "side_stream" in run.flags:
        return run.result()
    serve_refereed_window(job, prepared, guard)
    phases.done("timing")
    # The timed calls are over and synchronised: the parent may give the device to the next window while this
    # process writes files and exits (it is stopped, as every member, while another owns the device).
    child_words.say(job, "timed_path", "timed")
    if changed := tamper.changes(before, tamper.fingerprint(task_module)):
        result["flags"] = sorted({*result["flags"], "tampers_reference"})
        result["flag_notes"].setdefault("tampers_reference", "while timing: " + "; ".join(changed))
    if guard.check("after the timing window"):
        result["flags"] = sorted({*result["flags"], "tampers_verifier"})
        result["flag_notes"].setdefault("tampers_verifier", guard.found)
    phases.done("fingerprint_after_timing")
    return result


def run_ncu(job: dict[str, Any]) -> dict[str, Any]:
    """Run the candidate under an NVTX range that the parent's ncu command line filters on."""
    import torch

    from builder import config
    from builder.tasks import instantiate
    from builder.verify.protocol.compare import sync
    from builder.verify.protocol.plan import trial_seeds

    task_module = _load_task(job)
    # Ready before the candidate's library loads and before any device work: until its turn this process runs no
    # candidate code, so it is never stopped there (runs that stopped ncu children in their set-up stalled).
    child_words.await_turn(job, "go_path")
    binding = _load_binding(job)
    device = "cuda" if job.get("backend") == "cuda" else "cpu"
    seed = trial_seeds(job)[0]
    with torch.no_grad():
        model, inputs = instantiate(task_module, seed, device)
        call = binding.bind(model, task_module, seed, device).call
        call(*inputs)  # warm-up outside the range: lazy module loading, first-call allocations
        sync(device)
        for _ in range(config.NCU_PROFILED_CALLS):
            with torch.cuda.nvtx.range(config.NVTX_CANDIDATE_RANGE) if device == "cuda" else nullcontext():
                call(*inputs)
        sync(device)
    child_words.say(job, "turn_done_path", "done")
    return {"status": "correct", "flags": [], "error": None, "profiled_calls": config.NCU_PROFILED_CALLS}


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """Dispatch on job["mode"]; never raises (an unexpected error becomes a runtime_error result)."""
    from builder.verify.child.failures import exception_text

    started = time.perf_counter()
    mode = job.get("mode", "evaluate")
    try:
        if mode == "evaluate":
            result = run_evaluate(job)
        elif mode == "reference":
            result = run_reference_job(job)
        elif mode == "baseline":
            from builder.verify.child.baselines import run_baselines

            result = run_baselines(_load_task(job), job)
        elif mode == "ncu":
            result = run_ncu(job)
        else:
            result = _failure("runtime_error", f"unknown child mode {mode!r}", "child")
    except Exception as exc:  # noqa: BLE001 - e.g. a CUDA error surfacing outside the candidate's call
        result = _failure("runtime_error", exception_text(exc), "child")
    result["mode"] = mode
    result["child_s"] = time.perf_counter() - started
    return result


def _prepare_process(init_cuda: bool, prime: bool) -> None:
    import torch

    from builder.verify.child import tamper
    from builder.verify.child.poison import configure_cpu_allocator

    configure_cpu_allocator()
    if prime:  # the evaluation's fingerprints import torch._dynamo: seconds a pre-started child pays early
        tamper.prime()
    if init_cuda and torch.cuda.is_available():
        torch.cuda.init()
        torch.empty(1, device="cuda")  # create the context now, not inside the first measured call
        if prime:  # an evaluation child: its checks' allocations come from one block taken now
            from builder.verify.child.poison import reserve_cuda

            reserve_cuda(device_reserve_bytes())
    # The imports' few hundred thousand objects live as long as the process: kept out of the cyclic collector,
    # its full collections need not walk them. (A zygote freezes again after `before_fork`, for any child module.)
    gc.freeze()


def device_reserve_bytes() -> int:
    """The block an evaluation child takes before its job: the parent's choice (`child_env`), else the config's."""
    from builder import config

    chosen = os.environ.get(config.EVAL_DEVICE_RESERVE_ENV, "")
    return int(chosen) if chosen.isdigit() else config.EVAL_DEVICE_RESERVE_BYTES


def before_fork() -> None:
    """A zygote's imports, done once for every child it forks (zygote.py): a pre-start's, less the CUDA context;
    and the output digest's kernel for the device the parent named, compiled by a process of its own (NVRTC opens
    the driver), which a child without a zygote compiles only when it is timed (output_digest.compile_kernel_apart)."""
    from builder import config
    from builder.verify.protocol.output_digest import compile_kernel_apart

    _prepare_process(init_cuda=False, prime=True)
    if arch := os.environ.get(config.DIGEST_KERNEL_ARCH_ENV, ""):
        compile_kernel_apart(arch)


def main(argv: list[str] | None = None) -> int:
    child_words.note_parent()
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m builder.verify.child.main JOB.json | -", file=sys.stderr)
        return 2
    if args[0] == "-":
        _prepare_process(init_cuda=True, prime=True)
        from builder import config

        Path(config.POOLED_CHILD_READY_NAME).touch()  # in its scratch dir: the parent starts its clock now
        job_path = sys.stdin.readline().strip()
    else:
        job_path = args[0]
    try:
        job = json.loads(Path(job_path).read_text())
    except (OSError, ValueError) as exc:
        print(f"error: unreadable job {job_path}: {exc}", file=sys.stderr)
        return 2
    if args[0] != "-":
        _prepare_process(init_cuda=job.get("backend") == "cuda", prime=job.get("mode", "evaluate") == "evaluate")
    result = run_job(job)
    if _GUARD[0] is not None:
        _GUARD[0].check("before the result was written")
    try:
        child_words.write_result(job["result_path"], result)
    except (OSError, KeyError, TypeError, ValueError) as exc:
        print(f"error: cannot write the result: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown: after a CUDA fault its destructors can hang; the result is on disk
