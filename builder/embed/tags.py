"""Static detection of implementation strategies (`strategy_tags`), vocabulary config.STRATEGY_TAGS.

Detection reads code with comments removed and string literals emptied (inline-assembly strings are
kept: they are the PTX), so a comment or an error message that mentions a feature never tags.
The rules are documented in docs/embeddings.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from builder import config
from builder.embed.code_text import code_view
from builder.embed.fusion import fused
from builder.embed.kernel_scan import kernel_pointer_params, loop_bodies, statements

_VECTOR_TYPES = (
    r"(?:float[234]|double[24]|half2|__half2|nv_bfloat162|__nv_bfloat162|u?int[24]|u?char4|u?short[24]|longlong2)"
)
_SIMPLE = {
    "warp_shuffle": re.compile(
        r"\b__shfl(?:_up|_down|_xor)?(?:_sync)?\s*\(|\.shfl(?:_up|_down|_xor)?\s*\(|\b__reduce_\w+_sync\s*\("
    ),
    "vectorized_loads": re.compile(
        rf"\b{_VECTOR_TYPES}\b"
        r"|\b_mm(?:256|512)?_(?:load|loadu|store|storeu)_p[sd]\b|\bat::vec::Vectorized\b|\bvld1q_f32\b"
    ),
    "tensor_cores": re.compile(
        r"\bwmma::|\bnvcuda::wmma\b|\bmma\.sync\b|\bwgmma\b|\bwgmma\.|\btcgen05\.mma\b|\bmma_sync\s*\(|\b__hmma"
    ),
    "async_copy": re.compile(
        r"\bcp\.async\b|\bmemcpy_async\s*\(|\b__pipeline_memcpy_async\s*\(|\bCUtensorMap\b"
        r"|\bcuTensorMapEncode\w*\s*\(|\bcp_async\w*\s*\("
    ),
    "atomics": re.compile(
        r"\batomic(?:Add|Sub|Exch|Min|Max|Inc|Dec|CAS|And|Or|Xor)(?:_block|_system)?\s*\("
        r"|\bred\.(?:global|shared)|\batom\.|\bcuda::atomic(?:_ref)?\b|\bstd::atomic\b|#\s*pragma\s+omp\s+atomic"
    ),
    # `#pragma unroll 1` asks for no unrolling; any other count (or none) unrolls.
    "loop_unrolling": re.compile(r"#\s*pragma\s+(?:unroll\b(?!\s*\(?\s*1\s*\)?\s*$)|GCC\s+unroll\s+(?!1\b)\d+)", re.M),
}

_GRID_PRODUCT = re.compile(r"(?:blockDim\.[xyz]\*gridDim\.[xyz]|gridDim\.[xyz]\*blockDim\.[xyz])")
_CASTS = re.compile(r"static_cast<[^<>]*>|\((?:unsigned\s+)?(?:int|long|size_t|int64_t|uint64_t|unsigned)\)|[()\s]")


def _is_grid_product(expression: str) -> bool:
    """`blockDim.x * gridDim.x` up to casts, parentheses and operand order."""
    return bool(_GRID_PRODUCT.fullmatch(_CASTS.sub("", expression)))


# Strategies that make a kernel non-naive (the manifests' convention: grid-stride, unrolling and fusion
# can all appear in otherwise naive code).
_OPTIMISATIONS = {"shared_memory_tiling", "warp_shuffle", "vectorized_loads", "tensor_cores", "async_copy", "atomics"}


_ASSIGNMENT = re.compile(r"^(?P<lhs>[^;]*?[^=!<>+\-*/%&|^])=(?!=)(?P<rhs>[^;]*)$", re.DOTALL)


def _shared_memory_tiling(code: str) -> bool:
    """Data staged through a __shared__ array (or a pointer into one): copied or computed from global
    memory into it (`tile[ty][tx] = xp[..]`, `row[c] = v` with `v = x[c] + r[c]` in the same loop), or
    written inside a loop that also synchronises (tiles, tree reductions, scans). A missing barrier is a
    bug, not another strategy, so staging needs no __syncthreads. Per-warp or per-thread partials written
    once from registers (`partial[warp] = v`) do not count."""
    shared = set(re.findall(r"__shared__[^;]*?\b(\w+)\s*\[", code))
    if not shared:
        return False
    shared = _pointers_derived_from(code, shared)
    in_shared = re.compile(r"\b(?:" + "|".join(map(re.escape, shared)) + r")\s*\[")
    global_memory = _pointers_derived_from(code, kernel_pointer_params(code) - shared) - shared
    if global_memory:
        reads_global = re.compile(r"\b(?:" + "|".join(map(re.escape, global_memory)) + r")\s*\[")
        if any(_stages(statement, in_shared, reads_global) for statement in statements(code)):
            return True
        if any(_stages_a_loaded_value(body, in_shared, reads_global) for body in loop_bodies(code)):
            return True
    for body in loop_bodies(code):
        if "__syncthreads" not in body and "cp.async.wait" not in body and "pipeline" not in body:
            continue
        if "cp.async" in body or "memcpy_async" in body:
            return True
        for statement in statements(body):
            match = _ASSIGNMENT.match(statement) or re.match(r"(?P<lhs>[^;=]*?)[-+*/|&^]=(?P<rhs>.*)", statement)
            if match and in_shared.search(match.group("lhs")):
                return True
    return False


def _stages(statement: str, in_shared: re.Pattern[str], reads_global: re.Pattern[str]) -> bool:
    match = _ASSIGNMENT.match(statement)
    return bool(match) and bool(in_shared.search(match.group("lhs"))) and bool(reads_global.search(match.group("rhs")))


def _stages_a_loaded_value(body: str, in_shared: re.Pattern[str], reads_global: re.Pattern[str]) -> bool:
    """In one loop body, a local assigned from global memory and then written to shared memory
    (`const float v = x[c] + r[c]; row[c] = v;`)."""
    loaded: set[str] = set()
    for statement in statements(body):
        match = _ASSIGNMENT.match(statement)
        if not match:
            continue
        if loaded and in_shared.search(match.group("lhs")):
            if re.search(r"\b(?:" + "|".join(map(re.escape, loaded)) + r")\b", match.group("rhs")):
                return True
        if reads_global.search(match.group("rhs")):
            loaded |= set(re.findall(r"(\w+)\s*$", match.group("lhs")))
    return False


def _pointers_derived_from(code: str, roots: set[str]) -> set[str]:
    """roots plus every local pointer initialised from one of them (`const float* xr = x + row * n;`,
    `float* tile = smem + d;`), transitively."""
    names = set(roots)
    declarations = re.findall(r"\*\s*(?:const\s+)?(?:__restrict__\s+)?(\w+)\s*=\s*([^;]+);", code)
    grown = True
    while grown:
        grown = False
        for name, value in declarations:
            if name not in names and names & set(re.findall(r"\w+", value)):
                names.add(name)
                grown = True
    return names


def _pragma_unrolling(code: str) -> bool:
    """`#pragma unroll` on a loop that is not a warp-shuffle reduction (those have a constant trip count
    and are unrolled by the compiler anyway: the pragma there is boilerplate, not a strategy)."""
    for match in _SIMPLE["loop_unrolling"].finditer(code):
        loop = re.search(r"\b(?:for|while)\s*\(", code[match.end() :])
        if loop is None:
            return True
        if "shfl" not in loop_bodies(code[match.end() + loop.start() :])[0]:
            return True
    return False


def _manual_unrolling(code: str) -> bool:
    """A loop stepping by a constant whose body spells out the consecutive offsets +1, +2, +3 (of its
    index, `v[i + 1]` / `base[(i + 1) * n]`, or of any index, `v[k + 1]`)."""
    for match in re.finditer(r"\bfor\s*\([^;]*;[^;]*;\s*(\w+)\s*\+=\s*(?:\d+|[A-Z_][A-Z0-9_]*)\s*\)", code):
        body = loop_bodies(code[match.start() :])[0]
        index = re.escape(match.group(1))
        if all(re.search(rf"\+\s*{k}\s*\]", body) for k in (1, 2, 3)):
            return True
        if all(re.search(rf"\b{index}\s*\+\s*{k}\b", body) for k in (1, 2, 3)):
            return True
    return False


def _grid_stride(code: str) -> bool:
    """An index advanced by the whole grid: `i += blockDim.x * gridDim.x`, directly or via a variable."""
    stride_vars = {m.group(1) for m in re.finditer(r"\b(\w+)\s*=\s*([^;=]+);", code) if _is_grid_product(m.group(2))}
    for match in re.finditer(r"\+=\s*([^;]*)", code):
        step = _until_unbalanced_paren(match.group(1)).strip()
        if step in stride_vars or _is_grid_product(step):
            return True
    return False


def _until_unbalanced_paren(text: str) -> str:
    """The expression up to the `)` that closes an enclosing for-header, if any."""
    depth = 0
    for pos, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            return text[:pos]
    return text


_DETECTORS: dict[str, Callable[[str], bool]] = {
    **{tag: (lambda code, rx=rx: bool(rx.search(code))) for tag, rx in _SIMPLE.items() if tag != "loop_unrolling"},
    "shared_memory_tiling": _shared_memory_tiling,
    "grid_stride": _grid_stride,
    "loop_unrolling": lambda code: _pragma_unrolling(code) or _manual_unrolling(code),
    "fusion": fused,
}


def strategy_tags(source: str, language: str) -> list[str]:
    """Detected tags in config.STRATEGY_TAGS order; `naive` when no other strategy is found."""
    code = code_view(source, language, keep_strings=False)
    found = [tag for tag in config.STRATEGY_TAGS if tag in _DETECTORS and _DETECTORS[tag](code)]
    if not set(found) & _OPTIMISATIONS:
        found.insert(0, "naive")  # grid-stride loops, unrolling and fusion can still be naive code
    return found
