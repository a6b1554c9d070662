"""Constants of verification: correctness checks, timing, the sandbox, the engine that schedules them, and
the task suite's own checks."""

from __future__ import annotations

import os
from pathlib import Path

from builder.config.paths import CACHE_DIR, REPO_ROOT

# --- correctness -------------------------------------------------------------------------------
TOLERANCES = {"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (1e-2, 1e-2)}  # dtype -> (atol, rtol)
DEFAULT_TRIALS = 5
COMPARE_CHUNK_ELEMENTS = 1 << 18  # values per chunk when the judge compares on the CPU (cache-sized passes)
# The parent's comparisons of one kernel's outputs side by side, on threads all judges share (2 on a 2-core machine:
# 1.5x one; 4 there: 1.2-1.5x, the cores oversubscribed).
JUDGE_THREADS = min(4, os.cpu_count() or 1)
DEGENERATE_STD = 1e-6  # a reference output whose std (or the std along some axis, everywhere) is below this
DEGENERATE_AXIS_FRACTION = 0.99  # share of near-constant slices along an axis that makes the axis degenerate
POISON_BYTES = 1 << 30  # bytes of NaN-filled allocations released before each candidate call
# Every poisoned byte is 0xFF: a NaN in fp16, bf16, fp32 and fp64 that no arithmetic makes (CUDA's is 0x7FFFFFFF,
# x86's 0xFFC00000); an output element holding it was never written, or copied unwritten: `uninitialized_output`.
POISON_FILL_BYTE = 0xFF
PERTURB_SCALE = 0.5  # relative size of the perturbation used by the ignores_input check

# --- timing ------------------------------------------------------------------------------------
# Untimed warm-up pairs in a timing window: the device's state after the handover (clocks, caches) settles there.
# Each input set was called once before, on the shared device (lazy set-up, algorithm choice, output for the judge).
WARMUP_CALLS = 10
WINDOW_WARMUP_MS = 50.0  # fewer in-window warm-up pairs once they have run this long (a slow kernel's first pair)
TIMED_CALLS = 100
TIMING_BUDGET_S = 10.0  # stop early past this, with at least MIN_TIMED_CALLS
MIN_TIMED_CALLS = 20
MIN_TIMED_MS = 200.0  # ... or fewer calls where the candidate's timed calls already add up to this
INPUT_SETS = 2  # rotate at least two input sets while timing
TIMING_BLOCKS = 10  # a candidate's timed calls in this many blocks, alternating with PyTorch eager's blocks
MIN_TIMING_BLOCKS = 4  # blocks before the time budget may end the window (the ratio's spread needs several)
# A block holds as many calls (pairs) as fill this many ms, at most TIMED_CALLS / TIMING_BLOCKS: one call of a 70 ms
TIMING_BLOCK_MS = 20.0  # kernel is a steady block of its own, where ten cost the device 0.7 s
# A window ends early, after MIN_TIMING_BLOCKS, once the per-block eager/candidate ratios and the candidate's
# per-block medians each vary by at most this (IQR / median): further blocks would not move the figures. Not while
# its accounting would flag it (`judge/referee.py`).
TIMING_STABLE_SPREAD = 0.02
TIMING_SETTLED_CLAUSE = "stopped once"  # opens the clause saying a window settled: an outcome (reverify ignores it)
# Clauses of a timing method that say how one run of the same rule came out, not how it measures: a window that
# settled, an eager held to the clean one (baseline_cache.held_to_clean_eager), a second look (one_kernel.py).
EAGER_HELD_CLAUSE, SECOND_LOOK_CLAUSE = "PyTorch eager's median in the window", "evaluated twice"
TIMING_OUTCOME_CLAUSES = (TIMING_SETTLED_CLAUSE, EAGER_HELD_CLAUSE, SECOND_LOOK_CLAUSE)
# In-window eager vs the clean process's: past this, the clean one is measured again, and the speedup's eager is
# held to the clean one's plus this, on either backend (baseline_cache.held_to_clean_eager).
EAGER_CROSSCHECK_TOLERANCE = 0.10
L2_FLUSH_BYTES = 256 << 20  # larger than any Hopper L2 (50-60 MB)
LAUNCH_SPIN_MIN_MS, LAUNCH_SPIN_MAX_MS = 0.05, 1.0  # the device spins 2x the host's launch before a timed call
SUSPICIOUS_SPEEDUP = 10.0
# The parent referees a candidate's timing window (referee.py): per timed call, its clock may hold beyond the claimed
# times (lower quartile over half-blocks) at most what it holds for PyTorch eager in the same window, plus this share of the claimed median runtime,
# this share of eager's unaccounted time, this many interquartile ranges of eager's unaccounted time over its
# half-blocks (load from other processes) and a fixed slack per backend (the CPU's cache flush is a 64 MiB write whose
# time varies by more than a GPU's whole harness). Past that: `timing_mismatch` (judge/window.py). The clock functions
# themselves are fingerprinted (`tampers_verifier`): this check stands for what native code could hide from that.
TIMING_ACCOUNT_SHARE = 0.5
TIMING_ACCOUNT_OVERHEAD_SHARE = 0.25
TIMING_ACCOUNT_NOISE_IQRS = 1.5
TIMING_ACCOUNT_SLACK_MS = {"cuda": 0.02, "cpu": 0.3}
TIMING_CLAIM_OVER_WALL, TIMING_CLAIM_SLACK_MS = 0.02, 0.05  # claimed times may not exceed the half-block's wall
# Timed calls whose outputs the parent judges against a clean reference: (first, end, how many) over the window's
# candidate calls, scaled to its timed_calls, picked in secret when the task's reference is computed.
TIMED_SAMPLE_RANGES = ((0, 4, 1), (4, 20, 2), (20, 50, 2), (50, 100, 2))
# A sampled call's output is copied to the child's host memory in the window and written to a file for the parent once
# the device is given back (referee.py), where a window's samples hold at most this many bytes; larger ones are written
# in the window, as they end.
REVEAL_KEPT_MAX_BYTES = 2 << 30
# In-window eager slower than a clean process's eager (re-measured), in its median and in its fastest call alike, by
# more than this: `slowed_baseline` on CUDA; on the CPU, whose eager threads wait for cores on a loaded machine, the
# speedup rests on the clean eager instead (baseline_cache.weigh_slowed_eager).
EAGER_SLOWED_TOLERANCE = {"cuda": 0.5, "cpu": 1.0}

# implausible_runtime: a CUDA runtime below this share of its floor (the outputs and the inputs they depend on at
# peak DRAM bandwidth, `verify/judge/floor.py`), i.e. more than twice as fast as the memory allows. The margin covers
# inputs a kernel may legally skip in part and writes left in L2 when it ends; an honest memory-bound kernel
# reaches 0.8-0.9 of the floor.
IMPLAUSIBLE_RUNTIME_FRACTION = 0.5

# --- sandbox -----------------------------------------------------------------------------------
RUN_TIMEOUT_S = 300.0
REFERENCE_TIMEOUT_S = 600.0  # the clean reference child (verify/child/reference.py): once per task and seed set
# Clean references kept (LRU) as files in the parent's private directory, bounded by bytes and free disk, not a
# small count: a stream back to more tasks than it held recomputed one per candidate (measured 2026-11-26).
REFERENCE_CACHE_TASKS, REFERENCE_CACHE_BYTES, REFERENCE_CACHE_MIN_FREE_BYTES = 1024, 64 << 30, 8 << 30
REFERENCE_CACHE_MEMORY_SHARE = 0.25  # of the machine's memory, where the references' files live in memory
# The disk the parent's scratch is on holds the clean references' files and the evaluation children's outputs
# (engine/disk_room.py). References take at most this share of its free space as a stream starts (an engine among N
# a Nth of it); an evaluation child starts only where the rest has room for its task's outputs (its reference's
# bytes times EVAL_SCRATCH_OVER_REFERENCE: the child writes the outputs its reference holds, or fewer), above
# DISK_FLOOR_BYTES left for builds and logs. Measured 2026-12-01 on a one-H200 machine (64 GB free), re-verifying
# the sample's levels 2 and 3 without these bounds: about 46 GB beside twelve children's outputs of up to 16 GB,
# 2.1 GB left free, and six honest kernels failed "No space left on device" (docs/benchmarks.md).
REFERENCE_CACHE_DISK_SHARE = 0.5
EVAL_SCRATCH_OVER_REFERENCE = 1.25
DISK_FLOOR_BYTES = 2 << 30
DISK_ROOM_POLL_S = 0.25  # how often a child waiting for room looks again (space others free is seen then too)
REFERENCE_SHARE_PREFIX = "ka-shared-reference-"  # a reference one engine shares with another (clean_reference.py)
REFERENCE_FILE_MAX_BYTES = 32 << 30
OUTPUTS_FILE_SLACK_BYTES = 16 << 20  # a candidate's outputs file may exceed twice its expected size by this
JUDGE_POLL_S = 0.002  # how often the parent looks for the candidate's outputs, and the child for the parent's word
JUDGE_POLL_MAX_S = 0.025  # a watcher's looks back off to this while its child's state stands still (or an owner waits)
COMPILE_TIMEOUT_S = 600.0
LOG_TAIL_BYTES, ERROR_TEXT_BYTES = 8 * 1024, 8 * 1024  # a child's log tail kept; an error's text in a record
CHILD_FILE_SIZE_LIMIT, CHILD_CPU_SECONDS = 2 << 30, 3600  # a sandboxed child's largest file and its CPU time
CHILD_MAX_PROCESSES = 4096  # per-user limit; torch/OpenMP threads count as processes
# Byte code the sandboxed children read (builder/verify/sandbox/bytecode_cache.py), compiled once per environment by
# importing these in a trusted process (compiling torch's modules was half of a child's start-up without it).
BYTECODE_CACHE_DIR = Path(os.environ.get("KA_BYTECODE_DIR", CACHE_DIR / "bytecode"))
BYTECODE_WARM_MODULES = ("torch", "torch._dynamo", "torch.profiler", "torch.utils.cpp_extension",
                         "torch._inductor.compile_fx", "builder.verify.child.main", "builder.verify.child.checks",
                         "builder.verify.child.reference", "builder.verify.child.baselines", "builder.verify.child.build",
                         "builder.verify.child.op_census", "builder.verify.child.side_stream")  # fmt: skip
BYTECODE_WARM_TIMEOUT_S = 600.0
# Secrets hidden from sandboxed children under bwrap (with $HF_HOME, $HF_TOKEN_PATH, $XDG_CACHE_HOME/huggingface):
# a root uid reads them without any capability, password hashes and host keys too. Keys kept elsewhere: redaction.py.
SANDBOX_HIDDEN_PATHS = ("~/.cache/huggingface", "~/.huggingface", "~/.ssh", "~/.netrc", "~/.git-credentials",
                        "~/.aws", "~/.config/gcloud", "~/.docker", "~/.pypirc", "~/.kaggle", "~/.config/gh",
                        "~/.gnupg", "~/.npmrc", "~/.bash_history", "~/.zsh_history", "~/.python_history",
                        "/etc/shadow", "/etc/gshadow", "/etc/ssh")  # fmt: skip
# Environment variables a candidate may see; everything else (tokens, keys) is scrubbed.
SANDBOX_ENV_ALLOW = ("PATH", "LANG", "LC_ALL", "TERM", "TZ", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
                     "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH", "TORCH_CUDA_ARCH_LIST", "OMP_NUM_THREADS", "MAX_JOBS",
                     "CC", "CXX")  # fmt: skip
# A stored record's texts are redacted of the values of the builder's environment variables whose names hold one
# of these (builder/redaction.py); a shorter value (a flag, a port) would redact common words and is no key.
SECRET_ENV_NAMES = ("TOKEN", "KEY", "SECRET", "PASSW", "CREDENTIAL", "AUTH")
SECRET_MIN_CHARS = 8

# --- verification engine, parent side (builder/verify/engine/verifier.py, sandbox.py, compile.py, pool.py) ----
BWRAP_PROBE_TIMEOUT_S = 10.0  # `bwrap ... true` must finish within this to count as usable
BUILDER_COMMIT_ENV = "KA_BUILDER_COMMIT"  # the code's commit where the tree has no .git (records' builder_version)
SANDBOX_KILL_GRACE_S = 2.0  # wait for a killed process group to be reaped
SANDBOX_CANCEL_POLL_S = 0.2  # how often a wait that can be cancelled (a stopping build) checks for it
# Scratch folders of sandboxed children, a prefix per kind of work (the throughput bench's CPU census uses it).
SCRATCH_PREFIXES = {"compile": "ka-compile-", "evaluation": "ka-eval-", "baseline": "ka-baseline-",
                    "reference": "ka-reference-", "profiling": "ka-ncu-", "zygote": "ka-zygote-"}  # fmt: skip
# A source's `#include <torch/extension.h>` is first built as this header, written beside it: the two headers a
# kernel's code and its binding need, a third of a build's parse (builder/verify/compile/headers.py).
LIGHT_HEADER_NAME = "ka_torch_light.h"
LIGHT_HEADER_INCLUDES = ("torch/types.h", "torch/csrc/utils/pybind.h")
# Before it, a kernel whose torch names all fit is built against a leaner one: torch's own `torch/types.h` without
# its `<ATen/ATen.h>` and `<torch/library.h>`, ATen's operators one header each (`AT_PER_OPERATOR_HEADERS`, as torch
# builds itself), after these headers: the Tensor class, the dispatch macros, the operators on tensors, pybind11's.
LEAN_HEADER_NAME = "ka_torch_lean.h"
LEAN_HEADER_FIRST = ("ATen/core/Tensor.h", "ATen/Dispatch.h", "ATen/TensorOperators.h", "torch/csrc/utils/pybind.h")
LEAN_HEADER_DROPPED = ("ATen/ATen.h", "torch/library.h")  # from torch/types.h
# The `torch::` and `at::` names a lean build declares beyond the Tensor class's methods (a kernel naming another is
# built against the light headers first; one that calls itself wrong only costs a build, never changes a verdict):
# torch's factories (torch/csrc/autograd/generated/variable_factories.h), the types, `cuda` (the kernel's own
# includes declare what is in it), and every `k...` constant (dtypes, devices, layouts).
LEAN_TORCH_NAMES = frozenset({
    "Tensor", "TensorOptions", "ScalarType", "Scalar", "Dtype", "Device", "DeviceType", "Layout", "MemoryFormat",
    "IntArrayRef", "ArrayRef", "optional", "nullopt", "Half", "BFloat16", "Generator", "cuda",
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "arange", "from_blob", "rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "eye", "linspace",
    "scalar_tensor", "normal", "range", "dtype", "device", "requires_grad",
})  # fmt: skip
CPU_EXTENSION_CFLAGS = CUDA_EXTENSION_CFLAGS = ("-O3",)  # no --use_fast_math: numerics (VerifyOptions.fast_math)
CUDA_FAST_MATH_FLAG = "--use_fast_math"
# For a build something waits on now (a stream's first, a build on its own): nvcc's host front end (cudafe++) beside
# its device chain (cicc, ptxas, fatbinary), its own commands, the host compiler after both: the same build, sooner
# by the shorter chain, for the same core-s alone but more under load (builder/verify/child/nvcc_side_by_side.py).
NVCC_FRONT_ENDS_SIDE_BY_SIDE = True
# A stream's later builds run at this niceness: the first build and the evaluations get the cores first.
COMPILE_LATER_BUILDS_NICE = 10
# The builds of a stream's first window that are urgent (front ends side by side, the usual priority). One GPU: its
# first only. There its ramp's first three (1, 2, 4 kernels) urgent brought the next records sooner but not the
# run's end (twelve workers still had a queue to work through), and once slowed the first build. Several GPUs: the
# ramp's first four, 15 kernels for an engine's eight evaluation workers while its larger builds run. There, with
# only the first urgent, each engine's workers waited 10 s and more after its first record for the ramp's builds of
# 2, 4 and 8, which ended beside the larger builds; on one GPU's 16 cores (an engine's share) the four urgent ended
# those builds 12-15 s sooner without slowing the first (docs/benchmarks.md, "The ramp's first builds urgent, one
# GPU" and "Two GPUs against one, from a cold start").
COMPILE_URGENT_BUILDS_ONE_GPU, COMPILE_URGENT_BUILDS_SEVERAL_GPUS = 1, 4


def urgent_builds_for(gpus: int) -> int:
    """Urgent builds (`COMPILE_URGENT_BUILDS_*`) of a stream's first window that evaluates on `gpus` GPUs."""
    return COMPILE_URGENT_BUILDS_SEVERAL_GPUS if gpus > 1 else COMPILE_URGENT_BUILDS_ONE_GPU


# torch's nvcc dependency file (`--generate-dependencies-with-compile`) for builds in series: ninja reads it to rebuild
# after a header changes, and a build directory, keyed by everything a build reads, is built once; but skipping it
# saved nothing measurable (docs/benchmarks.md, "torch's nvcc dependency file"). A side-by-side build never writes it.
NVCC_DEPENDENCY_FILE = True


# Of the cores a stream may run on, the share its compile children (each runs ninja/nvcc) get: half with one GPU,
# where evaluation sets the pace after the start and more workers slowed each build (4x H200, 64 cores, one GPU:
# 48 workers put the first evaluated record at 106.5 s against 86.7 s with 32); three quarters with several,
# where compile sets it (four GPUs: 5,504 kernels/h with 48 against 4,286/h with 32; docs/benchmarks.md).
COMPILE_CORE_SHARE_ONE_GPU, COMPILE_CORE_SHARE_SEVERAL_GPUS = 0.5, 0.75


def compile_workers_for(cores: int, gpus: int = 1) -> int:
    """Parallel compile children for a stream that may run on `cores` cores and evaluates on `gpus` GPUs."""
    share = COMPILE_CORE_SHARE_SEVERAL_GPUS if gpus > 1 else COMPILE_CORE_SHARE_ONE_GPU
    return max(1, int(cores * share))


# Candidates per shared build at most (the torch headers dominate a build), no more than an even share of the
# compile workers; a stream's first builds ramp up from COMPILE_FIRST_BATCH_SIZE: a first build of one ends soonest
# and is the least likely to hold a compile error (the first evaluated record 2.7-4.4 s sooner than with 4, one
# GPU; docs/benchmarks.md).
COMPILE_BATCH_SIZE, COMPILE_FIRST_BATCH_SIZE = 16, 1
# Windows of candidates (COMPILE_BATCH_SIZE x compile workers) whose builds wait in the queue at once, earlier
# windows first: the next window's builds take the workers that the last one's stragglers leave idle.
COMPILE_WINDOWS_IN_FLIGHT = 2
EVAL_POOL_SIZE = 1  # pre-started evaluation processes per GPU worker, beyond the one running
EVAL_REFILL_AFTER_FIRST_REFERENCE = True  # a taken child's replacement waits for a first reference (pool.py)
FORK_EVALUATION_CHILDREN = True  # forked from a zygote, each into a bwrap sandbox of its own (verify/sandbox/zygote.py)
FORK_COMPILE_CHILDREN = True  # the same for compile children (verify/compile/build_child.py)
FORK_REFERENCE_CHILDREN = False  # clean references forked from it: no faster on the GPU (measured)
ZYGOTE_START_TIMEOUT_S = 300.0  # the zygote's imports (torch, torch._dynamo) on a busy box
FORK_TIMEOUT_S = 60.0  # a sandbox's holder is up, and a child forked into it, within this
# A pre-started child's clock waits for this file (its start-up's end), at most this long: a timeout is the candidate's
POOLED_CHILD_READY_NAME, POOLED_CHILD_READY_WAIT_S = "started", 120.0
# Evaluation workers per device, side by side while each timing window owns it (device_gate.py, docs/architecture.md):
# 12 on one GPU of at least 64 GiB with at least 16 cores, where a child spends a third of its wall waiting on the
# device or the parent and half the cores are not compile workers' (all 96 cold kernels in 2-10 % less time than
# with 8 in four of five pairs of runs on one H200 and 16 cores; docs/benchmarks.md); 8 elsewhere: where compile
# sets the pace (several GPUs: three quarters of the cores compile), fewer cores are left to the children, or each
# child's context and block (EVAL_DEVICE_RESERVE_BYTES) would take more of a smaller GPU from the kernels' tensors.
EVAL_WORKERS_PER_GPU = 8
EVAL_WORKERS_ONE_GPU_WIDE, EVAL_WORKERS_WIDE_MIN_CORES, EVAL_WORKERS_WIDE_MIN_GPU_GIB = 12, 16, 64
EVAL_WORKERS_CPU = 1  # one on the CPU backend, whose checks share the compiles' cores


def eval_workers_for(cores: int, gpus: int, gpu_gib: float | None = None) -> int:
    """Evaluation workers per GPU for a stream that may run on `cores` cores and evaluates on `gpus` GPUs (0: the
    CPU backend) of `gpu_gib` GiB each (None: not known)."""
    if gpus < 1:
        return EVAL_WORKERS_CPU
    wide = cores >= EVAL_WORKERS_WIDE_MIN_CORES and (gpu_gib or 0) >= EVAL_WORKERS_WIDE_MIN_GPU_GIB
    return EVAL_WORKERS_ONE_GPU_WIDE if gpus == 1 and wide else EVAL_WORKERS_PER_GPU


ENGINE_PROCESS_PER_GPU = True  # a stream over several GPUs runs an engine process each (engine/device_engines.py)
ENGINE_STOP_GRACE_S = 30.0  # a stopped engine closes its stream (its children and builds) within this
ENGINE_PARENT_POLL_S = 1.0  # how often an engine looks whether its builder is still there
ENGINE_BALANCE_WAIT_S = 30.0  # an engine that has not asked for pairs this long holds the others back no longer
ENGINE_READING_S = 1.0  # for the stream's last pairs, only an engine that asked this recently holds others back
ENGINE_HAND_BACK_MIN_PAIRS = 1  # least handed back at the end: its reference goes with it (verify/engine/hand_back.py)
TIMING_CORES_PER_GPU = 2  # cores per GPU for its timing windows alone, if half remain for the rest (device_gate.py)
BASELINE_TIMEOUT_S = 900.0
REFERENCE_WARM_WORKERS = 4  # clean references computed ahead of the tasks' first candidates (CUDA builds)
BASELINE_WARM_WORKERS = 4  # eager + torch.compile baselines of one task (inductor compiles inside)
# inductor's compile threads in a baseline child: its default worker processes cost the cores the first builds need.
BASELINE_COMPILE_THREADS = 1  # the code it makes, and its timing, is the same (benchmarks/probe_baseline_compile.py)
SEED_BITS = 63  # seeds are secrets.randbits(SEED_BITS), drawn per build
# The builder's own failures (builder/verify/engine/infrastructure.py): a build stops once this many pairs in a row failed
# that way, each confirmed by the control kernel failing too; their pairs wait, unrecorded, for the next run.
INFRA_CONSECUTIVE_FAILURES_MAX = 3
# The control kernel: a known-good bundled candidate of a cheap task (relu), from the checkout's own data (not
# KA_DATA_DIR's, which a build may point at a corpus without it).
INFRA_CONTROL_TASK_FILE = REPO_ROOT / "data" / "tasks" / "level1" / "19_relu.py"
INFRA_CONTROL_FILES = {"cpu": REPO_ROOT / "data" / "candidates" / "cpu" / "level1" / "19_relu" / "naive.cpp",
                       "cuda": REPO_ROOT / "data" / "candidates" / "cuda" / "level1" / "19_relu" / "naive_grid_stride.cu"}  # fmt: skip
INFRA_CONTROL_GENERATOR = "control"  # the control kernel's candidate says so: judged by its verdict, never stored
PREFLIGHT_CACHE_SUBDIR = "preflight"  # under CACHE_DIR: one file per environment whose control kernel passed
PREFLIGHT_MAX_AGE_S = 7 * 24 * 3600.0  # a passed preflight is believed this long for the same environment

# --- library use seen by the parent (builder/verify/judge/static_scan.py, extension_symbols.py, aten_names.py) ----------
# Names a candidate may call in ATen for allocation and shapes without it counting as library work (with the
# census's CPU_ALLOWED_ATEN_OPS); the type names are what `at::Tensor(...)` and the like read as in a source.
TORCH_ALLOCATION_NAMES = frozenset({
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "from_blob", "arange", "tensor", "scalar_tensor", "TensorOptions", "Tensor", "Scalar", "IntArrayRef",
    "Device", "device", "dtype", "kFloat", "kHalf", "kBFloat16", "kInt", "kLong", "kCUDA", "kCPU",
})  # fmt: skip
# ATen's namespaces of one dispatch key each (`at::cpu::mm`): a call there skips the dispatcher, so the profiler
# never sees it; `at::native` holds the kernels themselves, `at::redispatch` calls past the profiler. Every operator
# in them counts but glue.
ATEN_BACKEND_NAMESPACES = frozenset({
    "redispatch", "cpu", "cuda", "native", "compositeexplicitautograd", "compositeexplicitautogradnonfunctional",
    "compositeimplicitautograd", "compositeimplicitautogradnestedtensor", "quantizedcpu", "quantizedcuda",
    "sparsecpu", "sparsecuda", "sparsecsrcpu", "sparsecsrcuda", "nestedtensorcpu", "nestedtensorcuda", "mkldnn",
})  # fmt: skip
# Library entry points by C name: BLAS, DNN, FFT, sparse and solver libraries of both backends.
LIBRARY_C_PREFIXES = ("cublas", "cudnn", "cufft", "cusparse", "cusolver", "cutensor", "cblas_", "LAPACKE_",
                      "mkl_", "MKL_", "dnnl_", "mkldnn_")  # fmt: skip
# Fortran BLAS/LAPACK (`sgemm_`): what libtorch's own BLAS exports under these names.
LIBRARY_FORTRAN_NAME = r"[sdcz](?:gemm|gemv|ger|symm|symv|syrk|syr2k|trmm|trsm|trmv|trsv|dot|axpy|gesv|getrf|getrs|potrf|geqrf|gesdd|syevd)_"
# C++ namespaces (Itanium components) whose every import is library work: cuBLAS through ATen, CUTLASS's library,
# TorchScript (a scripted graph runs ATen ops).
LIBRARY_CXX_NAMESPACES = (("at", "cuda", "blas"), ("at", "cuda", "solver"), ("cutlass", "library"), ("torch", "jit"))
# ATen helpers that hand out a library's handle: only a call into that library needs one.
LIBRARY_HANDLE_GETTERS = frozenset({"getCurrentCUDABlasHandle", "getCurrentCUDABlasLtHandle",
                                    "getCurrentCUDASparseHandle", "getCurrentCUDASolverDnHandle"})  # fmt: skip
# Looking an operator up in the dispatcher by name: its kernel can then be called past the profiler.
DISPATCHER_LOOKUPS = frozenset({"findSchema", "findSchemaOrThrow", "findOp", "callBoxed"})
# Resolving symbols or importing Python modules at run time: a name no import shows. No honest extension the
# bundled corpus builds imports one (docs/architecture.md), so one is counted as library use that cannot be ruled out.
# Names an extension's imports resolve at run time: what they call, no import shows. The Python C API is left out:
# pybind11's own submodules (every shared build's glue) import PyImport_AddModule, and Python is reachable from any
# extension whatever it imports; a candidate's source that calls it is still flagged by the source scan.
RUNTIME_LOOKUPS = frozenset({"dlopen", "dlmopen", "dlsym", "dlvsym", "dladdr", "dladdr1", "dlinfo", "dl_iterate_phdr",
                             "_r_debug", "_dl_find_object"})  # fmt: skip
RUNTIME_LOOKUP_PREFIXES: tuple[str, ...] = ()
NM_TIMEOUT_S = 60.0  # reading one extension's dynamic symbols (nm, binutils)
EXTENSION_IMPORTS_SHOWN = 4  # library imports named in a flag's note (the rest counted)
FLAG_NOTE_CHARS = 600  # one flag's note in a record at most (the child's are claims, bounded like errors)

# --- verification engine, child side (builder/verify/child/main.py, checks.py, timing.py, static_scan.py) ---
POISON_FREE_FRACTION = 0.5  # share of free GPU memory the NaN poison may take (POISON_BYTES caps it)
# Before its job an evaluation child takes one block of this size (at most the share below of the free memory) from
# the driver, for the checks' allocations to be split from (poison.reserve_cuda; 0: none).
EVAL_DEVICE_RESERVE_BYTES = 2 << 30
EVAL_DEVICE_RESERVE_FREE_FRACTION = 1 / 24
EVAL_DEVICE_RESERVE_ENV = "KA_DEVICE_RESERVE_BYTES"  # VerifyOptions.device_reserve_bytes, to the children
# The device's compute capability ("90"), to the children: the output digest's kernel is compiled before any job
DIGEST_KERNEL_ARCH_ENV = "KA_DIGEST_KERNEL_ARCH"
DIGEST_KERNEL_COMPILE_TIMEOUT_S = 60  # the process that compiles it for a zygote (it took 0.2-0.6 s)
EVAL_DEVICE_CONNECTIONS = 2  # CUDA work queues of a candidate's context; the driver's 8 cost more (work_queues.py)
POISON_CHUNK_BYTES = 256 << 20  # GPU poison is allocated in chunks this size (plus output-sized blocks)
POISON_CPU_COPIES = 8  # at least this many output-sized NaN buffers freed before each CPU candidate call
POISON_CPU_MAX_COPIES = 64  # up to this many, within the byte budget below: enough to drain malloc's free chunks
POISON_CPU_BUDGET_BYTES = 64 << 20
# glibc would return large freed blocks to the OS (fresh pages are zero, not poison); these keep them
# in the heap so the next allocation of that size reuses the poisoned memory.
CPU_MALLOC_MMAP_THRESHOLD = 32 << 20
CPU_MALLOC_TRIM_THRESHOLD = 1 << 30
CPU_CACHE_FLUSH_BYTES = 64 << 20  # written before each timed CPU call (larger than common L3 slices)
SIDE_STREAM_CALLS = 7  # calls whose least wait past the calling stream's work is weighed, each after an empty one
# A call's wait past the calling stream, over an empty call's: less in some call is the clocks' noise (honest
# kernels in a busy engine reached 0.10 ms at the median of five calls, 0.01 ms on a quiet device).
SIDE_STREAM_MIN_GAP_MS = 0.12
# The stream-order probe (`verify/child/stream_order.py`): the device spin before the call (about 10 ms at 2 GHz), how
# many times it is lengthened (x4) while the host's launch of the call outlasts it, and by how much it must.
STREAM_ORDER_SPIN_CYCLES = 20_000_000
STREAM_ORDER_ATTEMPTS = 3
STREAM_ORDER_COVER_MARGIN_US = 200.0
TORCH_OPS_DOMINANT_FRACTION = 0.5  # library share of the call's time above which -> uses_torch_ops
CPU_CENSUS_CALLS = 3  # profiled calls of a CPU candidate for the torch-op census (max share taken)
KERNELS_SEEN_MAX = 50  # distinct kernel/op names listed in a result
# ATen ops a candidate may call on the CPU without it counting as torch compute (allocation and views).
CPU_ALLOWED_ATEN_OPS = (
    "aten::empty",
    "aten::empty_like",
    "aten::empty_strided",
    "aten::zeros",
    "aten::zeros_like",
    "aten::ones",
    "aten::ones_like",
    "aten::full",
    "aten::full_like",
    "aten::view",
    "aten::reshape",
    "aten::contiguous",
    "aten::to",
    "aten::_to_copy",
    "aten::copy_",
    "aten::as_strided",
    "aten::resize_",
    "aten::detach",
    "aten::alias",
    "aten::size",
    "aten::stride",
    "aten::numel",
    "aten::lift_fresh",
    "aten::zero_",
    "aten::fill_",
    "aten::expand",
    "aten::squeeze",
    "aten::unsqueeze",
    "aten::flatten",
    "aten::select",
    "aten::slice",
    "aten::t",
    "aten::transpose",
    "aten::permute",
    "aten::item",
    "aten::_local_scalar_dense",
    "aten::clone",
)
NVTX_CANDIDATE_RANGE = "ka_candidate"  # ncu mode wraps the profiled candidate calls in this NVTX range
NCU_PROFILED_CALLS = 1  # candidate calls inside the NVTX range in ncu mode (after one warm-up call)

# --- task suite quality (tests/builder/tasks hold every built-in task to these at CPU size) ------
# Reference outputs must be far from what a lazy kernel could return: std well above fp32 tolerances, no axis of many
# constant slices, and a good share of elements beyond the task's tolerance of both zero and the output's median.
TASK_MIN_OUTPUT_STD = 1e-3
# A slice along an axis is constant when all its elements lie within the task tolerance of its mean (a kernel
# broadcasting one value would pass it); no axis may have more than this share of them.
TASK_MAX_CONSTANT_SLICE_FRACTION = 0.5
TASK_MIN_DISTINGUISHABLE_FRACTION = 0.25  # share of elements outside tolerance of 0 and of the median
TASK_MIN_SCALAR_MAGNITUDE = 1e-2  # a scalar output (e.g. a loss) must not be ~0
TASK_PERTURBATION = 0.5  # relative noise added to one input/parameter to check the output depends on it
