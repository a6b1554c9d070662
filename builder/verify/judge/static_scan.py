"""Static scan of candidate source text (runs in the trusted parent: it only reads text).

`scan_notes(source, language) -> {flag: why}` (`scan` gives the flags alone):
- `uses_torch_ops`: the source calls PyTorch/ATen compute ops or cuBLAS/cuDNN for its main work
  (matmul, convolution, linear, einsum, torch::nn::functional, ...). Allocation helpers (empty,
  empty_like, zeros, ...) are fine; so is light glue when the file also has its own kernel or loops. A call
  that skips the dispatcher (`at::cpu::tanh`, `at::_ops::mm::redispatch`, `at::native::...`), an operator looked up
  by name, or a name resolved at run time (`dlsym`, a Python import from C++) counts whatever the operator.
- `host_side_effects`: threads, processes (system/popen/fork/exec), file I/O, sockets, environment.

C/C++/CUDA lines continued with a backslash are joined first (as the compiler does), then comments and string
literals are blanked, so a mention there never triggers. Python (`ModelNew` files) is scanned through its AST
(`static_scan_python.py`). What a text scan cannot see (names made by token pasting, say) the built extension's
imports show (`extension_symbols.py`).
"""

from __future__ import annotations

import re

from builder import config
from builder.verify.judge import aten_names
_CPP_TOKENS = re.compile(
    r"""
      (?P<line_comment>//[^\n]*)
    | (?P<block_comment>/\*.*?\*/)
    | (?P<raw_string>R"(?P<delim>[^()\\\s]{0,16})\((?:.|\n)*?\)(?P=delim)")
    | (?P<string>"(?:\\.|[^"\\\n])*")
    | (?P<char>'(?:\\.|[^'\\\n])+')
    """,
    re.DOTALL | re.VERBOSE,
)

_HEAVY_OPS = aten_names.HEAVY_OPS
_CPP_HEAVY = re.compile(
    rf"\b(?:at|torch)::(?:native::)?(?:{_HEAVY_OPS})\s*\("
    rf"|\.\s*(?:{_HEAVY_OPS})\s*\("
    r"|\btorch::nn::functional\b|\bF::\w+\s*\("
    r"|\bcublas\w*\s*\(|\bcublasLt\w*\s*\(|\bcudnn\w*\s*\(",
)
# ATen by a path past the dispatcher: a backend's namespace (`at::cpu::mm`, also named in a using-declaration or
# taken by address), an operator's entry struct (`at::_ops::mm::call`), cuBLAS through ATen, CUTLASS's library.
_S = r"\s*::\s*"
_CPP_BACKEND = re.compile(rf"\bat{_S}(?P<ns>{'|'.join(sorted(config.ATEN_BACKEND_NAMESPACES))}){_S}(?P<name>\w+)")
_CPP_OPS_ENTRY = re.compile(rf"\b_ops{_S}(?P<op>\w+)(?:{_S}(?P<entry>\w+))?")
_CPP_LIBRARY = re.compile(
    rf"\b(?:{'|'.join(config.LIBRARY_C_PREFIXES)})\w*\s*\("
    rf"|\bat{_S}cuda{_S}(?:blas|solver){_S}|\bcutlass{_S}library{_S}"
    rf"|\btorch{_S}jit{_S}(?:load|compile|Module|script)\b"
    r"|\b(?:findSchemaOrThrow|findSchema|findOp)\s*\("
)
# Names resolved at run time, and Python reached from C++: what they call, no text shows.
_CPP_RUNTIME = re.compile(
    r"\b(?:dlsym|dlvsym|dlopen|dlmopen|dladdr1?|dlinfo|dl_iterate_phdr)\s*\("
    r"|\b(?:PyImport_\w+|PyRun_\w+|PyEval_EvalCode\w*|Py_CompileString\w*)\s*\("
    rf"|\bmodule_?{_S}import\s*\(|\bpy{_S}(?:eval|exec)\b"
)
# Any other ATen/torch op (not allocation): counts only when the file has no kernel/loops of its own.
_CPP_ALLOCATION = config.TORCH_ALLOCATION_NAMES
_CPP_ANY_OP = re.compile(r"\b(?:at|torch)::(\w+)\s*\(|\b_ops::(\w+)::call\s*\(")
_CPP_OWN_WORK = re.compile(r"__global__|\bfor\s*\(|\bwhile\s*\(|#\s*pragma\s+omp|\bparallel_for\b")

# remove/rename/open/bind/connect/... are also std:: algorithms and members: only free calls count.
_FREE = r"(?<!::)(?<![\w.>])"
_CPP_SIDE_EFFECTS = re.compile(
    r"\bstd::(?:thread|jthread|async)\b|\bpthread_create\s*\("
    r"|\b(?:system|popen|fork|vfork|execl|execlp|execle|execv|execvp|execvpe|execve|posix_spawnp?)\s*\("
    r"|\b(?:fopen|freopen|fdopen|openat|creat|unlink|mkdir|opendir)\s*\("
    r"|\bstd::(?:ofstream|ifstream|fstream|filesystem)\b|\bstd::experimental::filesystem\b"
    r"|\b(?:socket|gethostbyname|getaddrinfo)\s*\("
    r"|\b(?:getenv|secure_getenv|setenv|unsetenv|putenv|clearenv)\s*\(|\benviron\b"
    r"|\b(?:dlopen|syscall|ptrace)\s*\("
    rf"|{_FREE}(?:open|remove|rename|bind|connect|listen|accept)\s*\("
)


def strip_comments_and_strings(source: str) -> str:
    """Blank C/C++ comments and string/char literals, keeping line breaks (and #include <...>)."""

    def blank(match: re.Match[str]) -> str:
        text = match.group(0)
        if match.group("string") is not None or match.group("raw_string") is not None:
            return '""' + "\n" * text.count("\n")
        if match.group("char") is not None:
            return "' '"
        return " " + "\n" * text.count("\n")

    return _CPP_TOKENS.sub(blank, source)


def code_of(source: str) -> str:
    """The C/C++ code a compiler reads: continued lines joined (`m\\<newline>m` is `mm`), comments and strings
    blanked."""
    return strip_comments_and_strings(re.sub(r"\\\r?\n", "", source))


def _said(match: re.Match[str]) -> str:
    return " ".join(match.group(0).split()).replace(" ::", "::").replace(":: ", "::").rstrip("( ")


def library_calls(code: str) -> list[str]:
    """What in `code` (from `code_of`) hands work to a library whatever else the file does, as written there."""
    found = [_said(m) for m in _CPP_HEAVY.finditer(code)]
    for match in _CPP_BACKEND.finditer(code):
        namespace, name = match.group("ns"), match.group("name")
        if aten_names.is_glue(name):
            continue
        if namespace == "native" or name in config.LIBRARY_HANDLE_GETTERS or aten_names.is_op(name):
            found.append(_said(match))
    for match in _CPP_OPS_ENTRY.finditer(code):
        op, entry = match.group("op"), match.group("entry")
        # `call` goes through the dispatcher, as `at::mm` does: the heavy ones count whatever else the file does
        # (the light ones where it has no work of its own). Any other entry skips the dispatcher.
        wanted = aten_names.is_heavy(op) if entry == "call" else not aten_names.is_glue(op)
        if wanted:
            found.append(_said(match))
    found += [_said(m) for m in _CPP_LIBRARY.finditer(code)]
    found += [_said(m) for m in _CPP_RUNTIME.finditer(code)]
    return list(dict.fromkeys(found))


def _scan_cpp(source: str) -> dict[str, str]:
    code = code_of(source)
    notes: dict[str, str] = {}
    calls = library_calls(code)
    if calls:
        notes["uses_torch_ops"] = "source calls " + _listed(calls)
    elif not _CPP_OWN_WORK.search(code):
        ops = [a or b for a, b in _CPP_ANY_OP.findall(code)]
        others = [op for op in ops if op not in _CPP_ALLOCATION]
        if others:
            notes["uses_torch_ops"] = "source has no kernel or loop of its own and calls " + _listed(others)
    side_effect = _CPP_SIDE_EFFECTS.search(code)
    if side_effect:
        notes["host_side_effects"] = f"source calls {_said(side_effect)}"
    return notes


def _listed(items: list[str]) -> str:
    shown = items[: config.EXTENSION_IMPORTS_SHOWN]
    more = len(items) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more else "")


def scan_notes(source: str, language: str) -> dict[str, str]:
    """The flags the source text alone justifies ("cuda"/"cpp"/"c++" or "python"), each with what showed it."""
    if language.lower() in ("python", "py"):
        from builder.verify.judge.static_scan_python import scan_python  # it reads C++ in strings with this module

        return scan_python(source)
    return _scan_cpp(source)


def scan(source: str, language: str) -> set[str]:
    """Flags the source text alone justifies ("cuda"/"cpp"/"c++" or "python")."""
    return set(scan_notes(source, language))
