"""Pull the candidate source out of a chat response.

Responses hold the code in fenced blocks (``` or ~~~, with or without a language tag), sometimes in
several blocks (a kernel file, a setup.py, a test), sometimes unfenced with prose around it, sometimes
cut off mid-block by the token limit. The block that implements the contract wins: a
`PYBIND11_MODULE` that binds `forward` scores highest, then a `forward` definition, then the language
tag. A response with no usable block gives `None` and a reason; the loop then records the attempt as a
failure (see `unusable_source`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)[ \t]*(?P<tag>[^\s`]*)[^\n]*$", re.MULTILINE)
CPP_TAGS = {"cpp", "c++", "cc", "cxx", "cuda", "cu", "c", "h", "hpp", "cuh"}
PY_TAGS = {"python", "py", "python3"}


@dataclass(frozen=True)
class Block:
    tag: str
    code: str
    closed: bool


@dataclass(frozen=True)
class Extraction:
    code: str | None
    reason: str | None = None  # why nothing usable was found


def fenced_blocks(text: str) -> list[Block]:
    """Every fenced block in order; an unclosed last block runs to the end of the text."""
    blocks: list[Block] = []
    pos = 0
    while True:
        opening = FENCE.search(text, pos)
        if not opening:
            return blocks
        fence = opening.group("fence")
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0]) * len(fence)}{re.escape(fence[0])}*[ \t]*$", re.MULTILINE)
        end = closing.search(text, opening.end())
        body_start = opening.end() + 1
        if end is None:
            blocks.append(Block(opening.group("tag").lower(), text[body_start:], closed=False))
            return blocks
        blocks.append(Block(opening.group("tag").lower(), text[body_start : end.start()], closed=True))
        pos = end.end()


def _cpp_score(block: Block) -> int:
    code = block.code
    score = 0
    if "PYBIND11_MODULE" in code:
        score += 8
        if re.search(r"\bm\.def\(\s*\"forward\"", code):
            score += 4
    if re.search(r"\btorch::Tensor\s+forward\s*\(", code):
        score += 4
    if "#include" in code:
        score += 1
    if block.tag in CPP_TAGS:
        score += 1
    if block.tag in PY_TAGS:
        score -= 4  # a setup.py or a test around the kernel
    return score


def _unfenced_cpp(text: str) -> str | None:
    """Code pasted without fences: from the first #include to the end of the PYBIND11_MODULE block."""
    start = text.find("#include")
    bind = text.find("PYBIND11_MODULE")
    if start < 0 or bind < start:
        return None
    brace = text.find("{", bind)
    if brace < 0:
        return None
    depth = 0
    for index in range(brace, len(text)):
        if text[index] == "{":
            depth += 1
        elif text[index] == "}":
            depth -= 1
            if depth == 0:
                return text[start : index + 1] + "\n"
    return None


def extract_kernel(text: str) -> Extraction:
    """The kernel source (CUDA or C++ CPU contract) from a response."""
    if not text or not text.strip():
        return Extraction(None, "empty response")
    blocks = [b for b in fenced_blocks(text) if b.code.strip()]
    scored = sorted(((_cpp_score(b), len(b.code), b) for b in blocks), key=lambda t: (t[0], t[1]), reverse=True)
    if scored and scored[0][0] >= 8:
        best = scored[0][2]
        return Extraction(best.code if best.code.endswith("\n") else best.code + "\n")
    unfenced = _unfenced_cpp(text)
    if unfenced:
        return Extraction(unfenced)
    if scored and scored[0][0] >= 4:
        # A forward() without the binding: hand it to the compiler, which will say what is missing.
        best = scored[0][2]
        return Extraction(best.code if best.code.endswith("\n") else best.code + "\n")
    if not blocks:
        return Extraction(None, "no code block in the response")
    return Extraction(None, "no block defines forward() or PYBIND11_MODULE")


def extract_python(text: str, required: tuple[str, ...] = ("def module_fn", "class Model")) -> Extraction:
    """A Python block containing every `required` snippet (used for functional forms)."""
    if not text or not text.strip():
        return Extraction(None, "empty response")
    blocks = [b for b in fenced_blocks(text) if all(r in b.code for r in required)]
    if blocks:
        best = max(blocks, key=lambda b: (b.tag in PY_TAGS, len(b.code)))
        return Extraction(best.code if best.code.endswith("\n") else best.code + "\n")
    if all(r in text for r in required) and not fenced_blocks(text):
        return Extraction(text.strip() + "\n")
    return Extraction(None, f"no Python block with {' and '.join(required)}")


def unusable_source(raw_response: str, reason: str, language: str) -> str:
    """The source recorded for a response without usable code.

    The raw response is kept verbatim inside a comment, after a directive that makes any compiler stop
    with the reason, so the verifier records `compile_error` and the attempt (with its tokens and cost)
    stays in the archive. A comment terminator inside the response is split so the comment stays closed.
    """
    reason = " ".join(reason.replace('"', "'").replace("\\", "/").split())[:300]
    if language == "python":
        body = raw_response.replace('"""', '\\"\\"\\"')
        return f'raise SyntaxError("no usable code in the LLM response: {reason}")\n"""\n{body}\n"""\n'
    body = raw_response.replace("*/", "* /")
    return f'#error "no usable code in the LLM response: {reason}"\n/* raw response:\n{body}\n*/\n'
