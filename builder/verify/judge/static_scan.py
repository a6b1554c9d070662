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
from builder.verify.judge.source_text import _said, code_of, library_calls
from builder.verify.judge.static_scan_python import scan_python

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
        return scan_python(source)
    return _scan_cpp(source)


def scan(source: str, language: str) -> set[str]:
    """Flags the source text alone justifies ("cuda"/"cpp"/"c++" or "python")."""
    return set(scan_notes(source, language))
