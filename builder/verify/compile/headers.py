"""A build against the torch headers a kernel needs, not the whole of `<torch/extension.h>` (trusted parent side).

`<torch/extension.h>` is torch's C++ frontend whole (nn, optim, data, jit, serialization) and its Python bindings
of modules. A kernel's code and its pybind11 binding need `torch/types.h` (Tensor, the factories, ATen) and
torch's pybind11 header (the Tensor caster, `py`). nvcc parses a build's headers three times (cudafe++, cicc, the
host compiler), and the rest of `<torch/extension.h>` was a third of a build: one H200 machine, 16 cores, 8 builds
at once, 79.7 core-s a build against 51.3 (docs/benchmarks.md, "Where the start's time goes").

Most kernels need less still: the Tensor class and its methods, torch's factories (`torch::empty`...), the
dispatch macros and the operators on tensors, not every ATen operator's declaration. The lean header is the
installed torch's own `torch/types.h` (so every `torch::` name it declares is torch's) without its
`<ATen/ATen.h>` and `<torch/library.h>`, ATen's headers taken one operator at a time (`AT_PER_OPERATOR_HEADERS`,
as torch builds itself): 35.2 core-s a build against 49.3 on the same machine. A kernel whose `torch::`/`at::`
names all fit it (`fits_lean`) is built against it first.

So `compile/extension.py` builds a source that includes `<torch/extension.h>` up a ladder of header sets
(`variants`): lean where it fits, light, then the source as written. The header that include line names becomes
`"ka_torch_lean.h"` or `"ka_torch_light.h"`, written beside it. Where a build fails, the next is tried, and the
last one tried stands: a compiler error in a record is always the full build's (`HeaderTries` says which builds a
caller asks for). A name missing from a lighter set fails that build (an undeclared name is an error); the
declarations it does hold are torch's own, an operator's overloads together in its one header, so a kernel that
compiles against it calls what it would have called as written. A line becomes one line, so a compiler's line numbers are the source's (a shared build's failure is
blamed by them, `shared_source.blame`).
"""

from __future__ import annotations

import enum
import re
from functools import cache
from importlib.util import find_spec
from pathlib import Path

from builder import config

# The directive at the start of a line, in either spelling; what follows it on the line (a comment) is kept.
FULL_INCLUDE = re.compile(r"^(?P<directive>[ \t]*#[ \t]*include[ \t]*)(?:<torch/extension\.h>|\"torch/extension\.h\")",
                          re.MULTILINE)  # fmt: skip
LIGHT_NAME = f'"{config.LIGHT_HEADER_NAME}"'
LIGHT_INCLUDE = f"#include {LIGHT_NAME}"
LIGHT_HEADER_TEXT = "#pragma once\n" + "".join(f"#include <{name}>\n" for name in config.LIGHT_HEADER_INCLUDES)
LEAN_NAME = f'"{config.LEAN_HEADER_NAME}"'
LEAN_INCLUDE = f"#include {LEAN_NAME}"
# A raw string literal may hold a line that looks like the include; rewriting it would change the program.
RAW_STRING = re.compile(r"\bR\"[^(\s]*\(")
QUALIFIED_NAME = re.compile(r"(?<!\w)(?:torch|at)\s*::\s*(\w+)")
USING_NAMESPACE = re.compile(r"\busing\s+namespace\s+(?:torch|at|c10)\b")
DROPPED_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*<(?P<name>[\w/.]+)>[ \t]*$", re.MULTILINE)


class HeaderTries(enum.Enum):
    """The rungs of a source's ladder (`variants`: lean, light, as written) that `build_extension` tries, in order."""

    # A candidate alone: each rung while the one before it fails; the last one tried stands.
    EVERY_RUNG = "lean, light, then as written"
    # A shared build: one that fails is split by its log, so it is not tried again on a heavier rung.
    LIGHTEST_ONLY = "the lightest rung only"
    # A candidate a failed shared build's log named: its lightest rung would fail again.
    AFTER_LIGHTEST = "the rungs after the lightest"


class Rung(enum.IntEnum):
    """A source's lightest rung (`lightest_rung`), lightest first."""

    LEAN = 0
    LIGHT = 1
    AS_WRITTEN = 2


def lightest_rung(source: str) -> Rung:
    """The first rung `variants(source)` holds. A shared build is built on the rung all its members fit, so one
    member that needs a heavier rung makes the whole build heavier: shared builds group their members by this."""
    if lean_variant(source) is not None and lean_header_text() is not None:
        return Rung.LEAN
    return Rung.LIGHT if light_variant(source) is not None else Rung.AS_WRITTEN


def variants(source: str) -> list[tuple[str, dict[str, str]]]:
    """The ladder of `source`'s builds, lightest first: (text, files written beside it). The source as written is
    always the last rung; the lean and the light ones are there where the source has them."""
    rungs: list[tuple[str, dict[str, str]]] = []
    lean, lean_text = lean_variant(source), lean_header_text()
    if lean is not None and lean_text is not None:
        rungs.append((lean, {config.LEAN_HEADER_NAME: lean_text}))
    light = light_variant(source)
    if light is not None:
        rungs.append((light, {config.LIGHT_HEADER_NAME: LIGHT_HEADER_TEXT}))
    return [*rungs, (source, {})]


def light_variant(source: str) -> str | None:
    """`source` with the header each `#include <torch/extension.h>` line names made `LIGHT_NAME` (the rest of the
    line as it was), or None where there is no such line or the rewrite could change what the program means (a
    raw string literal; a line spliced onto the one before it by a backslash, which may continue a string
    literal). A line inside a comment may be rewritten: that changes nothing."""
    return _rewritten(source, LIGHT_NAME)


def lean_variant(source: str) -> str | None:
    """`source` with its `<torch/extension.h>` lines naming `LEAN_NAME`, where it has a light variant and its torch
    names fit the lean header (`fits_lean`); else None."""
    return _rewritten(source, LEAN_NAME) if fits_lean(source) else None


def fits_lean(source: str) -> bool:
    """Every `torch::`/`at::` name the source spells is one the lean header declares (`config.LEAN_TORCH_NAMES`,
    or a `k...` constant), and it brings no torch namespace into its own (its unqualified names are then not
    seen). A guess at what the build needs: a wrong one costs a build, the next rung's."""
    if USING_NAMESPACE.search(source):
        return False
    names = {match[1] for match in QUALIFIED_NAME.finditer(source)}
    return all(name in config.LEAN_TORCH_NAMES or re.fullmatch(r"k[A-Z]\w*", name) for name in names)


@cache
def lean_header_text() -> str | None:
    """The lean header's text, made from the installed torch's `torch/types.h`; None where torch is not installed
    here or its `torch/types.h` does not include the two headers as this expects (no lean rung then)."""
    spec = find_spec("torch")
    if spec is None or spec.origin is None:
        return None
    types_h = Path(spec.origin).parent / "include" / "torch" / "csrc" / "api" / "include" / "torch" / "types.h"
    try:
        text = types_h.read_text()
    except OSError:
        return None
    dropped = [match for match in DROPPED_INCLUDE.finditer(text) if match["name"] in config.LEAN_HEADER_DROPPED]
    if sorted(match["name"] for match in dropped) != sorted(config.LEAN_HEADER_DROPPED):
        return None
    kept = DROPPED_INCLUDE.sub(lambda match: "" if match["name"] in config.LEAN_HEADER_DROPPED else match[0], text)
    first = "".join(f"#include <{name}>\n" for name in config.LEAN_HEADER_FIRST)
    return "#pragma once\n#define AT_PER_OPERATOR_HEADERS\n" + first + kept


def _rewritten(source: str, header: str) -> str | None:
    if RAW_STRING.search(source):
        return None
    found = list(FULL_INCLUDE.finditer(source))
    if not found or any(source[: match.start()].rstrip(" \t\n").endswith("\\") for match in found):
        return None
    return FULL_INCLUDE.sub(lambda match: match["directive"] + header, source)
