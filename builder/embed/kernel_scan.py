"""Brace-level scanning of comment-free C++/CUDA text for the strategy-tag rules (builder/embed/tags.py).

Regex rules cannot see structure, so these helpers find the bodies they need: loops, kernels, and the
`__device__` helpers a kernel calls. They read text only and never fail on malformed code (an
unbalanced brace simply runs to the end of the text).
"""

from __future__ import annotations

import re

GLOBAL_FN = re.compile(r"\b__global__\b[^{;]*\{")
# A `__device__` function definition (not a `__device__` variable: no `=` before the parameter list).
_DEVICE_FN = re.compile(r"\b__device__\b[^{;=()]*?\b(\w+)\s*\([^;{]*\)\s*(?:const\s*)?\{")
_PAREN = re.compile(r"[()]")
_CALL = re.compile(r"\b(\w+)\s*(?:<[^;<>]*>)?\s*\(")


def match_close(text: str, open_pos: int, opener: str, closer: str) -> int:
    """Position just past the `closer` that balances the `opener` at open_pos (len(text) if none)."""
    depth = 0
    for pos in range(open_pos, len(text)):
        if text[pos] == opener:
            depth += 1
        elif text[pos] == closer:
            depth -= 1
            if depth == 0:
                return pos + 1
    return len(text)


def loop_bodies(code: str) -> list[str]:
    """The body of every `for`/`while` loop in order of appearance (a braceless body up to its `;`)."""
    bodies = []
    for match in re.finditer(r"\b(?:for|while)\s*\(", code):
        header_end = match_close(code, match.end() - 1, "(", ")")
        rest = code[header_end:]
        if rest.lstrip().startswith("{"):
            open_pos = header_end + len(rest) - len(rest.lstrip())
            bodies.append(code[open_pos : match_close(code, open_pos, "{", "}")])
        else:
            bodies.append(rest.split(";", 1)[0])
    return bodies


def kernel_bodies(code: str) -> list[str]:
    """Each `__global__` body followed by the bodies of the `__device__` functions it calls (transitively):
    a kernel whose epilogue lives in a helper still does that work itself."""
    helpers = device_function_bodies(code)
    kernels = []
    for match in GLOBAL_FN.finditer(code):
        body = code[match.end() - 1 : match_close(code, match.end() - 1, "{", "}")]
        parts, seen, pending = [body], set(), [body]
        while pending:
            for name in _CALL.findall(pending.pop()):
                if name in helpers and name not in seen:
                    seen.add(name)
                    parts.extend(helpers[name])
                    pending.extend(helpers[name])
        kernels.append("\n".join(parts))
    return kernels


def device_function_bodies(code: str) -> dict[str, list[str]]:
    """name -> bodies of the `__device__` functions of that name (overloads share a name: all are kept)."""
    bodies: dict[str, list[str]] = {}
    for match in _DEVICE_FN.finditer(code):
        if "__global__" in match.group():
            continue
        open_pos = match.end() - 1
        bodies.setdefault(match.group(1), []).append(code[open_pos : match_close(code, open_pos, "{", "}")])
    return bodies


def kernel_pointer_params(code: str) -> set[str]:
    """Names of the pointer parameters of every `__global__` function (the kernels' global memory)."""
    names: set[str] = set()
    for match in GLOBAL_FN.finditer(code):
        params = match.group()[match.group().find("(") :]
        names |= set(re.findall(r"\*\s*(?:const\s+)?(?:__restrict__\s+)?(\w+)\s*[,)]", params))
    return names


def statements(code: str) -> list[str]:
    """Code split into statements at `;`, `{` and `}`, each without a leading `for (...)` / `if (...)`
    header or the tail of one (`++k) acc += ...` -> `acc += ...`): good enough for one-line rules."""
    pieces = []
    for piece in re.split(r"[;{}]", code):
        piece = _after_unbalanced_paren(piece).strip()
        while True:
            header = re.match(r"(?:else\s+)?(?:if|for|while|switch)\s*\(", piece)
            if header is None:
                break
            piece = piece[match_close(piece, header.end() - 1, "(", ")") :].strip()
        piece = re.sub(r"^(?:else|return|do)\b\s*", "", piece)
        if piece:
            pieces.append(piece)
    return pieces


def _after_unbalanced_paren(text: str) -> str:
    """The text after the last `)` that closes a parenthesis opened before the text began."""
    depth, start = 0, 0
    for paren in _PAREN.finditer(text):
        depth += 1 if paren.group() == "(" else -1
        if depth < 0:
            depth, start = 0, paren.end()
    return text[start:]
