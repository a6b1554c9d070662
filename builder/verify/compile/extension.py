"""Compile candidate sources into torch extensions, sandboxed and content-addressed (trusted parent side).

A build runs `python -m builder.verify.child.build` in the sandbox with only its build directory
writable. Builds live in `<build cache>/builds/<key>/`, keyed by sha256 of (source, flags, torch version,
GPU arch, backend, toolchain: the interpreter, the host compiler, nvcc); a finished build (success or the
source's compiler error) is reused. A timed-out one is not, nor one whose failure looks like the machinery's
(`sandbox/suspects.compile_suspect`: the sandbox or interpreter did not start, the compiler is missing or was
killed, the disk is full): that result carries `infrastructure` and is never written to the cache.

A candidate's build is found again however the candidates are batched next time (`recall_build`): its own
build, or the shared build it was a member of (`remember_members` notes each member under its own key in
`<build cache>/members/`). A resumed or re-sized run batches differently, and a shared build's key is that of
its whole source.

A source that includes `<torch/extension.h>` is built first against the headers a kernel needs, up a ladder
(`headers.variants`: lean where the kernel fits it, light, then the source as written); where one fails the next is
built, and the last one built stands. Each is cached under its own key: `build_key` is the lightest's, and
`recall_build` reads the next where one failed.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from builder import config
from builder.verify import environment
from builder.verify.compile.build_child import run_build_child
from builder.verify.compile.headers import HeaderTries, variants
from builder.verify.sandbox.suspects import compile_suspect, suspect_text

SUFFIX_BY_LANGUAGE = {"cuda": ".cu", "cpp": ".cpp"}
RESULT_FILE = "result.json"
MEMBERS_DIR = "members"
# A compiler diagnostic line: "file:12:3: error: ..." (gcc/clang), "file(12): error: ..." (nvcc), ninja/ld.
ERROR_LINE = re.compile(r"(\berror\b|\bError\b|undefined reference|FAILED:)")
CONTEXT_LINES_BEFORE = 2


@dataclass
class CompileResult:
    ok: bool
    library_path: str | None = None
    module_name: str | None = None
    symbol_prefix: str = ""  # "c3." when the candidate is submodule c3 of a shared build
    error: str | None = None
    compile_s: float = 0.0
    cpu_s: float = 0.0  # CPU seconds the build used (compile core-seconds; 0 on a cache hit)
    cached: bool = False
    timed_out: bool = False
    isolation: str | None = None
    batch_size: int = 1  # candidates sharing this build
    cache_key: str | None = None
    infrastructure: str | None = None  # why this failure looks like the machinery's, not the source's (uncached)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def symbol(self) -> str:
        return f"{self.symbol_prefix}forward"


def compiler_excerpt(text: str, limit: int = config.ERROR_TEXT_BYTES) -> str:
    """Bound a compiler log to `limit` bytes, keeping the first error lines (the useful part) in view."""
    text = text.strip()
    if len(text.encode()) <= limit:
        return text
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if ERROR_LINE.search(line)), 0)
    start = max(0, first - CONTEXT_LINES_BEFORE)
    excerpt = "\n".join(lines[start:])
    head = "[...]\n" if start else ""
    budget = limit - len(head.encode()) - len("\n[...]")
    cut = excerpt.encode()[:budget].decode("utf-8", errors="ignore")
    return f"{head}{cut}\n[...]"


def compile_flags(backend: str, fast_math: bool = False) -> tuple[list[str], list[str]]:
    """(host cflags, nvcc cflags) for a backend. Device code is built for the present GPU only."""
    cflags = list(config.CPU_EXTENSION_CFLAGS)
    cuda_cflags: list[str] = []
    if backend == "cuda":
        cuda_cflags = list(config.CUDA_EXTENSION_CFLAGS)
        if fast_math:
            cuda_cflags.append(config.CUDA_FAST_MATH_FLAG)
    return cflags, cuda_cflags


def cache_key(source: str, flags: list[str], torch_version: str, arch: str | None, backend: str,
              toolchain: dict[str, str | None] | None = None, beside: dict[str, str] | None = None) -> str:  # fmt: skip
    """`beside`: the files written next to the source (name -> text) that it includes."""
    material = [source, flags, torch_version, arch, backend, toolchain or {}] + ([beside] if beside else [])
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def default_cache_dir() -> Path:
    return config.CACHE_DIR / "compile"


def _keyed(
    source: str, backend: str, fast_math: bool, device_index: int, beside: dict[str, str] | None = None
) -> tuple[str, list[str], list[str], str | None]:
    """(cache key, host cflags, nvcc cflags, GPU arch) of building `source` (with the files `beside` it) for this
    backend and device."""
    torch_version, _ = environment.torch_versions()
    arch = environment.gpu_arch(device_index) if backend == "cuda" else None
    cflags, cuda_cflags = compile_flags(backend, fast_math)
    toolchain = environment.toolchain(backend)
    key = cache_key(source, cflags + cuda_cflags, torch_version, arch, backend, toolchain, beside)
    return key, cflags, cuda_cflags, arch


@dataclass(frozen=True)
class BuildPlan:
    """What `build_extension` compiles for one source: the text and the files beside it (`headers.variants`: lean
    where the kernel fits it, light, then the source as written)."""

    text: str
    beside: dict[str, str] = field(default_factory=dict)


def build_plans(source: str, tries: HeaderTries = HeaderTries.EVERY_RUNG) -> list[BuildPlan]:
    rungs = [BuildPlan(text, beside) for text, beside in variants(source)]
    if tries is HeaderTries.LIGHTEST_ONLY:
        return rungs[:1]
    if tries is HeaderTries.AFTER_LIGHTEST:
        return rungs[1:] or rungs
    return rungs


def build_key(source: str, backend: str, fast_math: bool = False, device_index: int = 0) -> str:
    """The cache key of the first build `build_extension` tries for `source` (a member's key in `members/`)."""
    first = build_plans(source)[0]
    return _keyed(first.text, backend, fast_math, device_index, first.beside)[0]


def recall_build(source: str, language: str, backend: str, *, cache_dir: str | Path | None = None,
                 fast_math: bool = False, device_index: int = 0) -> CompileResult | None:  # fmt: skip
    """A finished earlier build of this one candidate, however it was batched then: its own build (success or
    compiler error), else the shared build it was a member of; None when there is none (build it)."""
    if language not in SUFFIX_BY_LANGUAGE or (backend == "cpu" and language == "cuda"):
        return None
    root = Path(cache_dir) if cache_dir else default_cache_dir()
    plans = build_plans(source)
    # the lightest build that compiled; else the build as written, whatever it gave
    for number, plan in enumerate(plans):
        plan_key = _keyed(plan.text, backend, fast_math, device_index, plan.beside)[0]
        own = _read_cached(root / "builds" / plan_key[:32])
        if own is not None and (own.get("ok") or number == len(plans) - 1):
            return _to_result(own, plan_key, cached_hit=True)
    key = build_key(source, backend, fast_math, device_index)
    try:
        entry = json.loads((root / MEMBERS_DIR / f"{key[:32]}.json").read_text())
        shared_key, prefix, size = str(entry["build"]), str(entry["symbol_prefix"]), int(entry["batch_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    shared = _read_cached(root / "builds" / shared_key[:32])
    if shared is None or not shared.get("ok"):
        return None  # only a good shared build is a member's build: a failed one was split, its members rebuilt
    return replace(_to_result(shared, shared_key, cached_hit=True), symbol_prefix=prefix, batch_size=size)


def remember_members(shared: CompileResult, members: list[tuple[str, str]], backend: str, *,
                     cache_dir: str | Path | None = None, fast_math: bool = False, device_index: int = 0) -> None:  # fmt: skip
    """Note a good shared build under each member's own key (members: (source, symbol prefix)), so that
    `recall_build` finds it whatever the next run's batches are."""
    if not shared.ok or not shared.cache_key:
        return
    root = Path(cache_dir) if cache_dir else default_cache_dir()
    (root / MEMBERS_DIR).mkdir(parents=True, exist_ok=True)
    for source, prefix in members:
        key = build_key(source, backend, fast_math, device_index)
        entry = {"build": shared.cache_key, "symbol_prefix": prefix, "batch_size": len(members)}
        path = root / MEMBERS_DIR / f"{key[:32]}.json"
        partial = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}")
        partial.write_text(json.dumps(entry))
        os.replace(partial, path)  # a reader sees a whole entry or none


def compile_env(backend: str, arch: str | None) -> dict[str, str]:
    """What a compile child's environment has besides the sandbox's own (and what its build zygote is keyed by)."""
    if backend != "cuda":
        return {}
    env = {}
    if arch:
        env["TORCH_CUDA_ARCH_LIST"] = arch  # torch turns it into -gencode flags: the present GPU's arch only
    cuda_home = environment.cuda_home()
    if cuda_home:
        env["CUDA_HOME"] = cuda_home  # the scrubbed PATH may not lead torch to nvcc
    return env


def device_compile_env(backend: str, device_index: int = 0) -> dict[str, str]:
    """`compile_env` for builds for this device (its GPU's architecture)."""
    return compile_env(backend, environment.gpu_arch(device_index) if backend == "cuda" else None)


def _read_cached(build_dir: Path) -> dict | None:
    try:
        data = json.loads((build_dir / RESULT_FILE).read_text())
    except (OSError, ValueError):
        return None
    if data.get("ok") and not Path(data.get("library_path") or "").is_file():
        return None  # a half-deleted cache entry: rebuild
    if not data.get("ok") and suspect_text(data.get("error")):
        return None  # a failure that names the machinery is never the source's to keep (nor read back)
    return data


def build_extension(
    source: str,
    language: str,
    backend: str,
    *,
    cache_dir: str | Path | None = None,
    timeout_s: float = config.COMPILE_TIMEOUT_S,
    fast_math: bool = False,
    device_index: int = 0,
    isolation: str | None = None,
    cancel: threading.Event | None = None,
    tries: HeaderTries = HeaderTries.EVERY_RUNG,
    urgent: bool = True,
) -> CompileResult:
    """Build one extension from `source` (one candidate or a shared batch) or reuse the cached build: by default
    its lightest variant first, then, where that fails to compile, the next, up to the source as written
    (`build_plans`; `tries` for a shared build and for a candidate a shared build's log named).

    An `urgent` build is one the caller waits on now (a build on its own, a stream's first): nvcc's front ends run
    side by side (`NVCC_FRONT_ENDS_SIDE_BY_SIDE`), at the usual priority. A stream's later builds are not: nvcc
    runs its steps in series, at `COMPILE_LATER_BUILDS_NICE`, behind the first build and the evaluations
    (docs/architecture.md, "nvcc's front ends side by side for the build the stream waits on").

    Setting `cancel` (a build shutting down) kills a compile in flight: SandboxCancelled propagates and nothing
    is cached, so the next build compiles this source again rather than reading a made-up failure."""
    if language not in SUFFIX_BY_LANGUAGE:
        raise ValueError(f"cannot compile language {language!r}")
    if backend == "cpu" and language == "cuda":
        return CompileResult(ok=False, error="a .cu candidate needs the cuda backend (use a .cpp file for cpu)")
    plans = build_plans(source, tries)
    spent_s = spent_cpu_s = 0.0
    for number, plan in enumerate(plans):
        result = _build_plan(plan, language, backend, cache_dir=cache_dir, timeout_s=timeout_s, fast_math=fast_math,
                             device_index=device_index, isolation=isolation, cancel=cancel, urgent=urgent)  # fmt: skip
        spent_s, spent_cpu_s = spent_s + result.compile_s, spent_cpu_s + result.cpu_s
        if result.ok or result.timed_out or result.infrastructure or number == len(plans) - 1:
            # what the failed lighter builds cost counts in the build that followed them
            return replace(result, compile_s=spent_s, cpu_s=spent_cpu_s)
    raise AssertionError("build_plans returns at least one plan")


def _build_plan(
    plan: BuildPlan,
    language: str,
    backend: str,
    *,
    cache_dir: str | Path | None,
    timeout_s: float,
    fast_math: bool,
    device_index: int,
    isolation: str | None,
    cancel: threading.Event | None,
    urgent: bool,
) -> CompileResult:
    source = plan.text
    key, cflags, cuda_cflags, arch = _keyed(source, backend, fast_math, device_index, plan.beside)
    root = Path(cache_dir) if cache_dir else default_cache_dir()
    build_dir = root / "builds" / key[:32]
    build_dir.mkdir(parents=True, exist_ok=True)
    module_name = f"ka_{key[:16]}"
    # One builder at a time per key: a second verifier of the same source waits, then hits the cache.
    with open(root / "builds" / f"{key[:32]}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cached = _read_cached(build_dir)
        if cached is not None:
            return _to_result(cached, key, cached_hit=True)
        # torch's cpp_extension guards a build dir with a "lock" baton file; a compile killed mid-way (a
        # SIGKILLed build) leaves it behind and the next compile would wait on it until its timeout. Our
        # flock above already makes this the only compile of the key, so any baton here is stale.
        (build_dir / "lock").unlink(missing_ok=True)
        for name, text in plan.beside.items():  # the headers the source includes from its own directory
            (build_dir / name).write_text(text)
        source_path = build_dir / f"{module_name}{SUFFIX_BY_LANGUAGE[language]}"
        source_path.write_text(source)
        job_path = build_dir / "job.json"
        result_path = build_dir / "child_result.json"
        result_path.unlink(missing_ok=True)
        side_by_side = urgent and config.NVCC_FRONT_ENDS_SIDE_BY_SIDE
        job = {
            "name": module_name,
            "source_path": str(source_path),
            "build_dir": str(build_dir),
            "backend": backend,
            "cflags": cflags,
            "cuda_cflags": cuda_cflags,
            "nvcc_side_by_side": side_by_side,
            "nvcc_dependency_file": config.NVCC_DEPENDENCY_FILE and not side_by_side,
            "nice": 0 if urgent else config.COMPILE_LATER_BUILDS_NICE,
            "result_path": str(result_path),
        }
        job_path.write_text(json.dumps(job))
        started = time.monotonic()
        scratch = Path(tempfile.mkdtemp(prefix=config.SCRATCH_PREFIXES["compile"]))
        try:
            outcome = run_build_child(job_path, scratch, timeout_s, build_dir, compile_env(backend, arch), isolation,
                                      cancel)  # fmt: skip
        except OSError as exc:  # the sandbox itself could not be started (its program, a full disk)
            return CompileResult(ok=False, module_name=module_name, error=f"the compile sandbox: {exc}", cache_key=key,
                                 infrastructure=f"the compile sandbox could not be started: {exc}")  # fmt: skip
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        wall = time.monotonic() - started
        if outcome.timed_out:
            return CompileResult(
                ok=False,
                module_name=module_name,
                error=f"compile timed out after {timeout_s:g} s",
                compile_s=wall,
                timed_out=True,
                isolation=outcome.isolation,
                cache_key=key,
            )
        try:
            data = json.loads(result_path.read_text())
            data = data if isinstance(data, dict) else None
        except (OSError, ValueError):
            data = None
        suspect = compile_suspect(outcome, data)
        if data is None or data.get("provisional"):
            data = {
                "ok": False,
                "module_name": module_name,
                "error": f"compiler process ended without a result ({outcome.describe()}): {outcome.stderr_tail}",
            }
        data["compile_s"] = wall
        data["isolation"] = outcome.isolation
        if data.get("error"):
            data["error_at"] = error_locations(data["error"], source_path.name)  # from the whole log
            data["error"] = compiler_excerpt(data["error"])
        else:
            data["error"] = None
        if data.get("ok") and not Path(data.get("library_path") or "").is_file():
            data.update(ok=False, error=f"build reported success but {data.get('library_path')} is missing")
        if suspect and not data.get("ok"):  # not the source's to keep: the next build of this key compiles again
            return replace(_to_result(data, key, cached_hit=False), infrastructure=suspect)
        (build_dir / RESULT_FILE).write_text(json.dumps(data))
        return _to_result(data, key, cached_hit=False)


def _to_result(data: dict, key: str, cached_hit: bool) -> CompileResult:
    return CompileResult(
        ok=bool(data.get("ok")),
        library_path=data.get("library_path"),
        module_name=data.get("module_name"),
        error=data.get("error"),
        compile_s=0.0 if cached_hit else float(data.get("compile_s") or 0.0),
        cpu_s=0.0 if cached_hit else float(data.get("cpu_s") or 0.0),
        cached=cached_hit,
        isolation=data.get("isolation"),
        cache_key=key,
        extra={"error_at": data["error_at"]} if data.get("error_at") else {},
    )


# Where a compiler log puts an error in the built file: nvcc "file.cu(12): error", gcc "file.cpp:12:3: error",
# and the line an instantiation that failed was asked for ("at line 12 of file.cu", "file.cpp:12:5:   required").
def error_locations(text: str, filename: str) -> dict[str, list]:
    """{"lines": the built file's lines the errors point at, "namespaces": `ka_cN` namespaces named in it
    (demangled `ka_c3::f`, or mangled `5ka_c3`)}: what a shared build's failure can be blamed on."""
    name = re.escape(filename)
    lines: set[int] = set()
    for pattern in (rf"{name}\((\d+)\): (?:error|catastrophic error)", rf"{name}:(\d+):(?:\d+:)? (?:fatal )?error",
                    rf"at line (\d+) of \S*{name}", rf"{name}:(\d+):\d+:\s+required from"):  # fmt: skip
        lines.update(int(match) for match in re.findall(pattern, text))
    namespaces = set(re.findall(r"\b(ka_c\d+)::", text))
    for length, rest in re.findall(r"(?<![0-9])(\d{1,2})(ka_c\d+)", text):  # Itanium: <length><name>
        if len(rest) >= int(length) > len("ka_c"):
            namespaces.add(rest[: int(length)])
    return {"lines": sorted(lines), "namespaces": sorted(namespaces)}
