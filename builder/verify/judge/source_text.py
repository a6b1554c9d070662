"""C/C++/CUDA source as a compiler reads it, and the library calls written in it (trusted parent side: reads
text). Both static scans (`static_scan.py` for C++, `static_scan_python.py` for C++ in a Python file's strings) use it."""

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
