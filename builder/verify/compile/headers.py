"""A build against the torch headers a kernel needs, not the whole of `<torch/extension.h>` (trusted parent side).

`<torch/extension.h>` is torch's C++ frontend whole (nn, optim, data, jit, serialization) and its Python bindings
of modules. A kernel's code and its pybind11 binding need `torch/types.h` (Tensor, the factories, ATen) and
torch's pybind11 header (the Tensor caster, `py`). nvcc parses a build's headers three times (cudafe++, cicc, the
host compiler), and the rest of `<torch/extension.h>` was a third of a build: one H200 machine, 16 cores, 8 builds
at once, 79.7 core-s a build against 51.3 (docs/benchmarks.md, "Where the start's time goes").

So `compile/extension.py` builds a source that includes `<torch/extension.h>` first as its `light_variant`:
the header that line names becomes `"ka_torch_light.h"`, written beside it (`LIGHT_HEADER_TEXT`). Where that
build fails, the source as written is built and its result stands: a compiler error in a record is always the
full build's (`HeaderTries` says which builds a caller asks for). A line becomes one line, so a compiler's line
numbers are the source's (a shared build's failure is blamed by them, `shared_source.blame`).
"""

from __future__ import annotations

import enum
import re

from builder import config

# The directive at the start of a line, in either spelling; what follows it on the line (a comment) is kept.
FULL_INCLUDE = re.compile(r"^(?P<directive>[ \t]*#[ \t]*include[ \t]*)(?:<torch/extension\.h>|\"torch/extension\.h\")",
                          re.MULTILINE)  # fmt: skip
LIGHT_NAME = f'"{config.LIGHT_HEADER_NAME}"'
LIGHT_INCLUDE = f"#include {LIGHT_NAME}"
LIGHT_HEADER_TEXT = "#pragma once\n" + "".join(f"#include <{name}>\n" for name in config.LIGHT_HEADER_INCLUDES)
# A raw string literal may hold a line that looks like the include; rewriting it would change the program.
RAW_STRING = re.compile(r"\bR\"[^(\s]*\(")


class HeaderTries(enum.Enum):
    """The builds `build_extension` tries, in order, for a source that has a light variant."""

    # A candidate alone: where the light build fails, the build as written follows and its result stands.
    LIGHT_THEN_AS_WRITTEN = "light, then as written"
    # A shared build: one that fails is split by its log, so it is not tried again as written.
    LIGHT_ONLY = "light only"
    # A candidate a failed shared light build's log named: its light build would fail again.
    AS_WRITTEN = "as written"


def light_variant(source: str) -> str | None:
    """`source` with the header each `#include <torch/extension.h>` line names made `LIGHT_NAME` (the rest of the
    line as it was), or None where there is no such line or the rewrite could change what the program means (a
    raw string literal; a line spliced onto the one before it by a backslash, which may continue a string
    literal). A line inside a comment may be rewritten: that changes nothing."""
    if RAW_STRING.search(source):
        return None
    found = list(FULL_INCLUDE.finditer(source))
    if not found or any(source[: match.start()].rstrip(" \t\n").endswith("\\") for match in found):
        return None
    return FULL_INCLUDE.sub(lambda match: match["directive"] + LIGHT_NAME, source)
