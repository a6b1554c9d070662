"""The source of a shared build: several candidates compiled as one extension (trusted parent side: reads text).

Each safe candidate is wrapped in its own namespace with its `#include` lines hoisted, and its
`PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {...}` turned into a `register` function that one shared
PYBIND11_MODULE calls with a submodule `cN`. The candidate's `forward` is then `module.cN.forward`.

Only candidates whose top level we fully understand are wrapped: anything that could influence another
candidate in the same library (macros, pragmas, load-time code such as global objects with constructors,
`__attribute__((constructor))`, `extern "C"` symbols, op registrations) is built alone (`wrap_candidate` says
why). `blame` reads a failed shared build's log back to the candidates it points at.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

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
