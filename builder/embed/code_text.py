"""Source text preparation: comment stripping, boilerplate removal, normalisation and chunking.

Everything here reads text only; generated kernels are never compiled or run by this package.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

# A C/C++/CUDA lexer just precise enough to tell comments from string and character literals,
# so that `"//"` inside a string is kept and `// "quoted"` is dropped.
_C_LEXEME = re.compile(
    r"""(?P<line_comment>//[^\n]*)"""
    r"""|(?P<block_comment>/\*.*?\*/)"""
    r"""|(?P<raw_string>R"(?P<delim>[^()\s\\]{0,16})\(.*?\)(?P=delim)")"""
    r"""|(?P<string>"(?:\\.|[^"\\\n])*")"""
    r"""|(?P<char>'(?:\\.|[^'\\\n])*')""",
    re.DOTALL,
)
_PY_LEXEME = re.compile(
    r"""(?P<string>[rRbBuUfF]{0,2}(?:'''.*?'''|\"\"\".*?\"\"\"|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"))"""
    r"""|(?P<comment>\#[^\n]*)""",
    re.DOTALL,
)
_TRIPLE_QUOTED = re.compile(r"""[rRbBuUfF]{0,2}(?:'''(.*?)'''|\"\"\"(.*?)\"\"\")""", re.DOTALL)
_ASM_START = re.compile(r"\b(?:asm|__asm__|__asm)\s*(?:volatile|__volatile__)?\s*\(")


def strip_c_comments(source: str, keep_strings: bool = True) -> str:
    """Remove // and /* */ comments (a block comment becomes one space, keeping tokens apart).

    With keep_strings=False, string literals are emptied (`""`) except inside inline-assembly statements,
    whose strings are the PTX instructions themselves.
    """
    asm_spans = _asm_spans(source) if not keep_strings else []

    def replace(match: re.Match[str]) -> str:
        kind = match.lastgroup
        if kind == "line_comment":
            return ""
        if kind == "block_comment":
            return "\n" * match.group().count("\n") or " "
        if keep_strings or kind == "char" or any(start <= match.start() < end for start, end in asm_spans):
            return match.group()
        return '""'

    return _C_LEXEME.sub(replace, source)


def _asm_spans(source: str) -> list[tuple[int, int]]:
    """(start, end) of every `asm(...)` statement, found by balancing parentheses."""
    spans = []
    for match in _ASM_START.finditer(source):
        depth, pos = 1, match.end()
        while pos < len(source) and depth:
            depth += {"(": 1, ")": -1}.get(source[pos], 0)
            pos += 1
        spans.append((match.start(), pos))
    return spans


def strip_python_comments(source: str) -> str:
    return _PY_LEXEME.sub(lambda m: "" if m.lastgroup == "comment" else m.group(), source)


def embedded_cuda_sources(python_source: str) -> list[str]:
    """CUDA/C++ sources held in triple-quoted strings of a Python candidate (load_inline style)."""
    found = []
    for match in _TRIPLE_QUOTED.finditer(python_source):
        body = match.group(1) if match.group(1) is not None else match.group(2)
        if "__global__" in body or "#include" in body or "torch::Tensor" in body:
            found.append(body)
    return found


def code_view(source: str, language: str, keep_strings: bool = True) -> str:
    """The comment-free code that analyses look at: for Python candidates, their inline CUDA sources
    when there are any (that is where the kernel is), else the Python code itself."""
    if language == "python":
        inline = embedded_cuda_sources(source)
        if inline:
            return "\n".join(strip_c_comments(part, keep_strings) for part in inline)
        return strip_python_comments(source)
    return strip_c_comments(source, keep_strings)


# Boilerplate that every candidate shares by contract and that says nothing about the kernel.
_INCLUDE = re.compile(r"^[ \t]*#[ \t]*(?:include|pragma[ \t]+once)\b[^\n]*$", re.MULTILINE)
_BALANCED_CALL = (
    "PYBIND11_MODULE",
    "TORCH_LIBRARY",
    "TORCH_LIBRARY_IMPL",
    "TORCH_CHECK",
    "TORCH_CHECK_EQ",
    "AT_ASSERT",
    "CHECK_INPUT",
    "CHECK_CUDA",
    "CHECK_CONTIGUOUS",
    "C10_CUDA_CHECK",
    "C10_CUDA_KERNEL_LAUNCH_CHECK",
    "AT_CUDA_CHECK",
    "cudaCheckError",
)
_CHECK_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+CHECK_\w+[^\n]*(?:\\\n[^\n]*)*$", re.MULTILINE)
_BLANK_RUNS = re.compile(r"\n[ \t]*(?:\n[ \t]*)+")


def _remove_balanced_calls(code: str, names: Sequence[str]) -> str:
    """Drop `NAME(...)` plus a following `{...}` body (PYBIND11_MODULE) or `;`."""
    pattern = re.compile(r"\b(?:" + "|".join(map(re.escape, names)) + r")\s*\(")
    out, pos = [], 0
    for match in pattern.finditer(code):
        if match.start() < pos:
            continue
        end = _skip_balanced(code, match.end() - 1, "(", ")")
        rest = code[end:]
        stripped = rest.lstrip()
        if stripped.startswith("{"):
            end = _skip_balanced(code, end + len(rest) - len(stripped), "{", "}")
        elif stripped.startswith(";"):
            end += len(rest) - len(stripped) + 1
        out.append(code[pos : match.start()])
        pos = end
    out.append(code[pos:])
    return "".join(out)


def _skip_balanced(text: str, open_pos: int, opener: str, closer: str) -> int:
    depth, pos = 0, open_pos
    while pos < len(text):
        char = text[pos]
        if char == opener:
            depth += 1
        elif char == closer:
            depth -= 1
            if depth == 0:
                return pos + 1
        pos += 1
    return len(text)


def device_code(source: str, language: str) -> str:
    """The text that gets embedded: comments, includes, pybind glue and input checks removed."""
    code = code_view(source, language)
    if language != "python" or embedded_cuda_sources(source):
        code = _INCLUDE.sub("", code)
        code = _CHECK_DEFINE.sub("", code)
        code = _remove_balanced_calls(code, _BALANCED_CALL)
    code = "\n".join(line.rstrip() for line in code.splitlines())
    return _BLANK_RUNS.sub("\n", code).strip()


def normalised_hash(source: str, language: str) -> str:
    """sha256 of the source with comments and all whitespace removed (exact-duplicate key)."""
    text = strip_python_comments(source) if language == "python" else strip_c_comments(source)
    return hashlib.sha256(re.sub(r"\s+", "", text).encode()).hexdigest()


def chunk_spans(n_tokens: int, window: int, overlap: int, max_chunks: int) -> list[tuple[int, int]]:
    """[start, end) token ranges of the chunks of one text: consecutive windows sharing `overlap`
    tokens; past max_chunks, that many windows evenly spread over the text (first and last kept)."""
    if window <= 0:
        raise ValueError("window must be positive")
    if n_tokens <= window:
        return [(0, n_tokens)]
    step = max(1, window - max(0, min(overlap, window - 1)))
    starts = list(range(0, n_tokens - window, step)) + [n_tokens - window]
    if len(starts) > max_chunks:
        last = len(starts) - 1
        picks = sorted({round(i * last / (max_chunks - 1)) for i in range(max_chunks)}) if max_chunks > 1 else [0]
        starts = [starts[i] for i in picks]
    return [(start, start + window) for start in starts]
