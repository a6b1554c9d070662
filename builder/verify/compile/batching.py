"""Shared builds: several candidates compiled as one extension, so the torch-header cost is paid once.

Each safe candidate is wrapped in its own namespace with its `#include` lines hoisted, and its
`PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {...}` turned into a `register` function that one shared
PYBIND11_MODULE calls with a submodule `cN`. The candidate's `forward` is then `module.cN.forward`.

Only candidates whose top level we fully understand are batched: anything that could influence another
candidate in the same library (macros, pragmas, load-time code such as global objects with constructors,
`__attribute__((constructor))`, `extern "C"` symbols, op registrations) is built alone. A batch that
fails to compile is split by its log (`blame`: the candidates its errors point at are built alone, the rest
together again), or bisected when the log names nobody, so each candidate gets its own verdict and a failing
one its own compiler message.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from typing import Any

from builder import config
from builder.verify.compile.build_queue import BuildQueue
from builder.verify.compile.extension import CompileResult

PYBIND_HEAD = re.compile(r"PYBIND11_MODULE\s*\(\s*TORCH_EXTENSION_NAME\s*,\s*(\w+)\s*\)\s*\{")
LOCAL_PRAGMA = re.compile(r"^#\s*pragma\s+unroll\b")
INCLUDE = re.compile(r"^\s*#\s*include\s*[<\"][^>\"]+[>\"]\s*$")
GLOBAL_UNSAFE = (
    (re.compile(r"__attribute__\s*\(\(\s*(constructor|destructor)"), "load-time constructor/destructor attribute"),
    (re.compile(r"\bextern\s*\"C"), 'extern "C" symbols'),
    (re.compile(r"\bR\"[^(\s]*\("), "raw string literal"),
)
SAFE_DECL_START = re.compile(r"^(namespace|struct|class|union|enum|template|typedef|using|static_assert)\b")
TYPE_DEFINITION = re.compile(r"^(template\s*<.*>\s*)?(struct|class|union|enum|typedef)\b")
FUNDAMENTAL_WORDS = frozenset(
    "const constexpr static inline __constant__ __device__ __host__ unsigned signed long short int float double "
    "char bool void size_t int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t".split()
)
IDENT = re.compile(r"[A-Za-z_]\w*")
SHARED_MODULE_VAR = "ka_m"


@dataclass
class WrappedCandidate:
    includes: list[str]
    body: str  # namespace-wrapped code including its ka_register function


def mask_source(source: str) -> str:
    """Same-length copy with comments and string/char literal contents blanked (newlines kept)."""
    out = list(source)
    i, n = 0, len(source)
    while i < n:
        two = source[i : i + 2]
        if two == "//":
            end = source.find("\n", i)
            end = n if end < 0 else end
            out[i:end] = " " * (end - i)
            i = end
        elif two == "/*":
            end = source.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out[i:end] = ["\n" if ch == "\n" else " " for ch in source[i:end]]
            i = end
        elif source[i] in "\"'":
            quote, j = source[i], i + 1
            while j < n and source[j] != quote and source[j] != "\n":
                j += 2 if source[j] == "\\" else 1
            out[i + 1 : j] = " " * (j - i - 1)
            i = j + 1
        else:
            i += 1
    return "".join(out)


def _matching_brace(masked: str, open_index: int) -> int:
    depth = 0
    for i in range(open_index, len(masked)):
        if masked[i] == "{":
            depth += 1
        elif masked[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return -1


def _top_level_chunks(masked: str) -> list[str]:
    """Split depth-0 code into declarations/definitions (ending in ';' or a closing '}')."""
    chunks, start, depth = [], 0, 0
    for i, ch in enumerate(masked):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            # A type definition runs on to its ';' (it may declare objects: `struct S {...} s;`).
            if depth == 0 and not TYPE_DEFINITION.match(" ".join(masked[start:i].split())):
                chunks.append(masked[start : i + 1])
                start = i + 1
        elif ch == ";" and depth == 0:
            chunks.append(masked[start : i + 1])
            start = i + 1
    tail = masked[start:].strip()
    if tail:
        chunks.append(tail)
    return [c.strip() for c in chunks if c.strip() and c.strip() != ";"]


def _looks_like_prototype(params: str) -> bool:
    pieces = [p.strip() for p in params.split(",")]
    if pieces == [""] or pieces == ["void"]:
        return True
    return all(re.search(r"[\w>*&]\s+[*&]*\w", p) for p in pieces)


def _unsafe_chunk(chunk: str) -> str | None:
    """Why a top-level declaration could affect other candidates (or cannot be classified), else None."""
    flat = " ".join(chunk.split())
    if flat.startswith("namespace") and "{" in flat and flat.endswith("}"):
        inner = chunk[chunk.index("{") + 1 : chunk.rindex("}")]  # a namespace's members are globals too
        return next((reason for part in _top_level_chunks(inner) if (reason := _unsafe_chunk(part))), None)
    if SAFE_DECL_START.match(flat):
        if flat.endswith(";") and "}" in flat and IDENT.search(flat[flat.rindex("}") + 1 :]):
            return f"global object declared with a type: {flat[:60]}"
        return None
    head = flat.split("{", 1)[0]
    if flat.endswith("}"):  # a function definition: return type + name + (params)
        words = IDENT.findall(head.split("(", 1)[0])
        if "(" in head and "=" not in head.split("(", 1)[0] and len(words) >= 2:
            return None
        return f"unrecognised top-level block: {flat[:60]}"
    decl, _, init = flat[:-1].partition("=")
    if "(" in decl and not init:
        if _looks_like_prototype(decl[decl.index("(") + 1 : decl.rindex(")")] if ")" in decl else ""):
            return None
        return f"global object constructed at load time: {flat[:60]}"
    words = IDENT.findall(decl.split("[", 1)[0])
    type_words = words[:-1]
    if not type_words or not all(w in FUNDAMENTAL_WORDS for w in type_words):
        return f"global variable of a non-fundamental type: {flat[:60]}"
    if init and "(" in init and "constexpr" not in words:
        return f"global variable with a dynamic initialiser: {flat[:60]}"
    return None


def wrap_candidate(source: str, namespace: str) -> WrappedCandidate | str:
    """Namespace-wrap a candidate for a shared build, or return the reason it must be built alone."""
    for pattern, reason in GLOBAL_UNSAFE:
        if pattern.search(source):
            return reason
    masked = mask_source(source)
    includes: list[str] = []
    code_lines, masked_lines = source.split("\n"), masked.split("\n")
    for index, line in enumerate(masked_lines):
        stripped = line.strip()
        if not stripped.startswith("#") or LOCAL_PRAGMA.match(stripped):
            continue  # `#pragma unroll` only affects the loop after it: harmless in a shared build
        if not INCLUDE.match(code_lines[index]):
            return f"preprocessor directive other than #include: {stripped[:40]}"
        includes.append(code_lines[index].strip())
        code_lines[index] = masked_lines[index] = ""
    source, masked = "\n".join(code_lines), "\n".join(masked_lines)
    heads = list(PYBIND_HEAD.finditer(masked))
    if len(heads) != 1:
        return "needs exactly one PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)"
    head = heads[0]
    close = _matching_brace(masked, head.end() - 1)
    if close < 0 or masked[: head.start()].count("{") != masked[: head.start()].count("}"):
        return "PYBIND11_MODULE is not at the top level"
    module_var = head.group(1)
    pybind_body = source[head.end() : close]
    rest_masked = masked[: head.start()] + masked[close + 1 :]
    for chunk in _top_level_chunks(rest_masked):
        reason = _unsafe_chunk(chunk)
        if reason:
            return reason
    code = source[: head.start()] + source[close + 1 :]
    body = (
        f"namespace {namespace} {{\n{code}\n"
        f"void ka_register(pybind11::module_& {module_var}) {{{pybind_body}}}\n"
        f"}}  // namespace {namespace}\n"
    )
    return WrappedCandidate(includes=includes, body=body)


def shared_source(wrapped: Sequence[WrappedCandidate], names: Sequence[str]) -> str:
    """One extension source whose PYBIND11_MODULE exposes candidate i as submodule names[i]."""
    # Candidates bring their own headers (normally <torch/extension.h>); pybind11 is what the glue needs.
    includes: list[str] = ["#include <pybind11/pybind11.h>"]
    for item in wrapped:
        includes += [line for line in item.includes if line not in includes]
    calls = "\n".join(
        f'    {{ auto sub = {SHARED_MODULE_VAR}.def_submodule("{name}"); ka_{name}::ka_register(sub); }}'
        for name in names
    )
    bodies = "\n".join(item.body for item in wrapped)
    return f"{chr(10).join(includes)}\n\n{bodies}\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, {SHARED_MODULE_VAR}) {{\n{calls}\n}}\n"


NAMESPACE_OPEN = re.compile(r"^namespace ka_c(\d+) \{$")
NAMESPACE_CLOSE = re.compile(r"^\}  // namespace ka_c(\d+)$")


def blame(failed: CompileResult, source: str) -> set[int]:
    """The candidates (indices) a failed shared build's errors point at: lines inside a candidate's namespace,
    or its namespace named. Empty when any error line lies outside every candidate (an include, the glue) or
    nothing was located: the caller then bisects."""
    where = failed.extra.get("error_at") or {}
    lines, named = where.get("lines") or [], where.get("namespaces") or []
    spans: list[tuple[int, int, int]] = []  # (first line, last line, index)
    opened: dict[int, int] = {}
    for number, line in enumerate(source.split("\n"), start=1):
        if match := NAMESPACE_OPEN.match(line):
            opened.setdefault(int(match.group(1)), number)
        elif (match := NAMESPACE_CLOSE.match(line)) and int(match.group(1)) in opened:
            spans.append((opened[int(match.group(1))], number, int(match.group(1))))
    culprits = {int(name.removeprefix("ka_c")) for name in named}
    for line in lines:
        owners = [index for first, last, index in spans if first <= line <= last]
        if not owners:
            return set()
        culprits.add(owners[0])
    return culprits


BuildFn = Callable[[str, str], CompileResult]  # (source, language) -> CompileResult


def batch_sizes(count: int, largest: int, workers: int = 1, first: int | None = None) -> list[int]:
    """The sizes of the shared builds that hold `count` candidates, in the order they are built.

    A build runs on one core and pays the torch headers once, then a little per kernel: no build holds more
    than `largest`, nor more than an even share of the `workers` (idle compile workers would leave the
    device waiting for the longest build). `first`, when given, starts a ramp (first, twice that, ...): the
    device has nothing to do until the first build is done, and a small build is done soonest."""
    if count <= 0:
        return []
    cap = max(1, min(largest, -(-count // max(1, workers))))
    size = cap if first is None else max(1, min(first, cap))
    sizes: list[int] = []
    while (left := count - sum(sizes)) > 0:
        sizes.append(min(size, left))
        size = min(cap, size * 2)
    return sizes


def plan_batches(
    sources: Sequence[tuple[str, str]],
    batch_size: int = config.COMPILE_BATCH_SIZE,
    workers: int = 1,
    first_batch_size: int | None = None,
    skip: Collection[int] = (),
    alone_asked: Collection[int] = (),
) -> tuple[list[list[tuple[int, WrappedCandidate]]], list[int], dict[int, str]]:
    """(shared batches of (index, wrapped), indices to build alone, index -> reason it was kept alone).

    Each language's safe candidates are cut in order by `batch_sizes` (at most `batch_size` a build); the
    indices in `skip` (already built) are left out, those in `alone_asked` built on their own."""
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
        start = 0
        for size in batch_sizes(len(members), max(1, batch_size), workers, first_batch_size):
            group, start = members[start : start + size], start + size
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
) -> list[CompileResult | None]:
    """Compile candidates (source, language) with shared builds where safe; None for python candidates.

    A shared build that fails is split by `blame`: the candidates its log points at are built alone and the rest
    together again (two extra builds for one bad candidate). When the log names nobody it is bisected: each half
    built again (in parallel on `executor`), down to the candidate that fails alone. `on_result(index, result)`
    is called as each candidate's build finishes (to start evaluating it). `workers` and `first_batch_size` size
    the builds (`batch_sizes`). Returns once every build of these candidates has ended.

    Builds wait in one queue (`queue`, shared by a stream's windows, numbered by `window`; else one of their
    own on `executor`), each worker taking the first: an earlier window's builds first; within a window, builds
    of candidates that may still be evaluated before culprits rebuilt for their own message only, each kind in
    the candidates' order. So a failed build's rebuild goes before later builds still waiting, as its
    candidates' place says (the device waits for them).

    `recall(source, language)` finds a candidate's earlier build, however it was batched then (those are not
    built again); `remember(shared, [(source, symbol prefix), ...])` notes a good shared build for its members.
    The candidates at the indices in `alone` are built on their own. `build_shared` and `build_culprit`, where
    given, build the shared sources and the candidates a failed shared build's log named (`build` the rest): a
    shared build's failure is split, so it need not try further, and a named candidate's first try may be skipped
    (`headers.HeaderTries`)."""
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

    def run_alone(index: int) -> None:
        finish(index, build(*sources[index]))

    def run_culprit(index: int) -> None:
        finish(index, (build_culprit or build)(*sources[index]))

    def run_batch(group: list[tuple[int, WrappedCandidate]]) -> None:
        names = [f"c{index}" for index, _ in group]
        language = sources[group[0][0]][1]
        source = shared_source([w for _, w in group], names)
        shared = (build_shared or build)(source, language)
        if not shared.ok and shared.infrastructure:  # the machinery failed, not a member: bisecting would not help
            for index, _ in group:
                finish(index, replace(shared, batch_size=len(group)))
            return
        if not shared.ok and (culprits := blame(shared, source)) & {index for index, _ in group}:
            # the log names who failed: they are built alone (their own message), the rest together again
            rest = [member for member in group if member[0] not in culprits]
            if len(rest) == 1:
                submit(run_alone, rest[0][0])
            elif rest:
                submit(run_batch, rest)
            for index, _ in group:
                if index in culprits:
                    submit(run_culprit, index, culprit=True)
            return
        if not shared.ok:  # nobody named: one bad candidate must not fail the others, build each half again
            middle = len(group) // 2
            for half in (group[:middle], group[middle:]):
                if len(half) == 1:
                    submit(run_alone, half[0][0])
                else:
                    submit(run_batch, half)
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
    for _, fn, arg in sorted(builds, key=lambda item: item[0]):
        submit(fn, arg)
    for index, found in recalled.items():  # after the builds are queued: the workers start while these are offered
        finish(index, found)
    with done:  # halves are submitted from pool threads: wait for the count, not for the first futures
        done.wait_for(lambda: pending == 0)
    if errors:
        raise errors[0]
    return results
