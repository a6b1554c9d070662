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


# Kinds of computation for the fusion heuristic: a kernel doing two or more kinds fuses several ops.
_OP_KINDS = {
    # multiply-accumulate of two different arrays (GEMM/conv inner products), fma, or a tensor-core mma
    "contraction": re.compile(
        r"\+=\s*[^;]*?\b(\w+)\s*(?:\[[^;\]]*\])+\s*\*\s*(?!\1\b)\w+\s*\[|\bfmaf?\s*\(|\b__fmaf?_r\w\s*\(|mma_sync\s*\(|\bmma\.sync\b"
    ),
    "activation": re.compile(
        r"\b(?:relu|gelu|silu|swish|sigmoid|mish|softplus|elu|selu|leaky\w*|hardswish|hardtanh)\w*\s*\("
        r"|\b(?:tanhf?|erff?|__expf|expf|exp|exp2f|__tanhf)\s*\("
        r"|>\s*0(?:\.0*)?f?\s*\?\s*\w+\s*:\s*0(?:\.0*)?f?\b"
        r"|\b(?:fmaxf?|max)\s*\(\s*0(?:\.0*)?f?\s*,|\b(?:fmaxf?|max)\s*\([^;,()]+(?:\([^;()]*\))?[^;,()]*,\s*0(?:\.0*)?f?\s*\)"
    ),
    "normalization": re.compile(r"\b(?:rsqrtf?|__frsqrt_rn)\s*\(|\beps(?:ilon)?\b"),
}
# Strategies that make a kernel non-naive (the manifests' convention: grid-stride, unrolling and fusion
# can all appear in otherwise naive code).
_OPTIMISATIONS = {"shared_memory_tiling", "warp_shuffle", "vectorized_loads", "tensor_cores", "async_copy", "atomics"}
_GLOBAL_FN = re.compile(r"\b__global__\b[^{;]*\{")


_ASSIGNMENT = re.compile(r"^(?P<lhs>[^;]*?[^=!<>+\-*/%&|^])=(?!=)(?P<rhs>[^;]*)$", re.DOTALL)


def _shared_memory_tiling(code: str) -> bool:
    """Data staged through a __shared__ array: written inside a loop that also synchronises (tiles,
    tree reductions, scans), or filled from a kernel's global pointer with a __syncthreads in the code.
    Writing per-warp partials once (`partial[warp] = v`) does not count."""
    shared = set(re.findall(r"__shared__[^;]*?\b(\w+)\s*\[", code))
    if not shared:
        return False
    names = "|".join(map(re.escape, shared))
    in_shared = re.compile(rf"\b(?:{names})\s*\[")
    pointers = _kernel_pointer_params(code) - shared
    if pointers and "__syncthreads" in code:
        reads_global = re.compile(r"\b(?:" + "|".join(map(re.escape, pointers)) + r")\s*\[")
        for statement in re.split(r"[;{}]", code):
            match = _ASSIGNMENT.match(statement.strip())
            if match and in_shared.search(match.group("lhs")) and reads_global.search(match.group("rhs")):
                return True
    for body in _loop_bodies(code):
        if "__syncthreads" not in body and "cp.async.wait" not in body and "pipeline" not in body:
            continue
        if "cp.async" in body or "memcpy_async" in body:
            return True
        for statement in re.split(r"[;{}]", body):
            match = _ASSIGNMENT.match(statement.strip()) or re.match(r"(?P<lhs>[^;]*?)[-+*/|&^]=(?P<rhs>.*)", statement)
            if match and in_shared.search(match.group("lhs")):
                return True
    return False


def _kernel_pointer_params(code: str) -> set[str]:
    names: set[str] = set()
    for match in _GLOBAL_FN.finditer(code):
        params = match.group()[match.group().find("(") :]
        names |= set(re.findall(r"\*\s*(?:const\s+)?(?:__restrict__\s+)?(\w+)\s*[,)]", params))
    return names


def _pragma_unrolling(code: str) -> bool:
    """`#pragma unroll` on a loop that is not a warp-shuffle reduction (those have a constant trip count
    and are unrolled by the compiler anyway: the pragma there is boilerplate, not a strategy)."""
    for match in _SIMPLE["loop_unrolling"].finditer(code):
        loop = re.search(r"\b(?:for|while)\s*\(", code[match.end() :])
        if loop is None:
            return True
        if "shfl" not in _loop_bodies(code[match.end() + loop.start() :])[0]:
            return True
    return False


def _manual_unrolling(code: str) -> bool:
    """A loop stepping by a constant whose body spells out the consecutive offsets +1, +2, +3."""
    for match in re.finditer(r"\bfor\s*\([^;]*;[^;]*;[^)]*\+=\s*(?:\d+|[A-Z_][A-Z0-9_]*)\s*\)", code):
        body = _loop_bodies(code[match.start() :])[0]
        if all(re.search(rf"\+\s*{k}\s*\]", body) for k in (1, 2, 3)):
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


def _fusion(code: str) -> bool:
    bodies = list(_kernel_bodies(code)) or [code]
    return any(sum(bool(kind.search(body)) for kind in _OP_KINDS.values()) >= 2 for body in bodies)


def _loop_bodies(code: str) -> list[str]:
    bodies = []
    for match in re.finditer(r"\b(?:for|while)\s*\(", code):
        header_end = _match_close(code, match.end() - 1, "(", ")")
        rest = code[header_end:]
        if rest.lstrip().startswith("{"):
            open_pos = header_end + len(rest) - len(rest.lstrip())
            bodies.append(code[open_pos : _match_close(code, open_pos, "{", "}")])
        else:
            bodies.append(rest.split(";", 1)[0])
    return bodies


def _kernel_bodies(code: str) -> list[str]:
    """Each `__global__` body followed by the bodies of the `__device__` functions it calls (transitively):
    a kernel whose epilogue lives in a helper still does that work itself."""
    helpers = _device_function_bodies(code)
    kernels = []
    for match in _GLOBAL_FN.finditer(code):
        parts = [code[match.end() - 1 : _match_close(code, match.end() - 1, "{", "}")]]
        seen: set[str] = set()
        pending = [parts[0]]
        while pending:
            text = pending.pop()
            for name in re.findall(r"\b(\w+)\s*(?:<[^;<>]*>)?\s*\(", text):
                if name in helpers and name not in seen:
                    seen.add(name)
                    parts.extend(helpers[name])
                    pending.extend(helpers[name])
        kernels.append("\n".join(parts))
    return kernels


_DEVICE_FN = re.compile(r"\b__device__\b[^{;=()]*?\b(\w+)\s*\([^;{]*\)\s*(?:const\s*)?\{")


def _device_function_bodies(code: str) -> dict[str, list[str]]:
    """name -> bodies of `__device__` functions (overloads share a name, so all of them are kept)."""
    bodies: dict[str, list[str]] = {}
    for match in _DEVICE_FN.finditer(code):
        if "__global__" in match.group():
            continue
        open_pos = match.end() - 1
        bodies.setdefault(match.group(1), []).append(code[open_pos : _match_close(code, open_pos, "{", "}")])
    return bodies


def _match_close(text: str, open_pos: int, opener: str, closer: str) -> int:
    depth = 0
    for pos in range(open_pos, len(text)):
        if text[pos] == opener:
            depth += 1
        elif text[pos] == closer:
            depth -= 1
            if depth == 0:
                return pos + 1
    return len(text)


_DETECTORS: dict[str, Callable[[str], bool]] = {
    **{tag: (lambda code, rx=rx: bool(rx.search(code))) for tag, rx in _SIMPLE.items() if tag != "loop_unrolling"},
    "shared_memory_tiling": _shared_memory_tiling,
    "grid_stride": _grid_stride,
    "loop_unrolling": lambda code: _pragma_unrolling(code) or _manual_unrolling(code),
    "fusion": _fusion,
}


def strategy_tags(source: str, language: str) -> list[str]:
    """Detected tags in config.STRATEGY_TAGS order; `naive` when no other strategy is found."""
    code = code_view(source, language, keep_strings=False)
    found = [tag for tag in config.STRATEGY_TAGS if tag in _DETECTORS and _DETECTORS[tag](code)]
    if not set(found) & _OPTIMISATIONS:
        found.insert(0, "naive")  # grid-stride loops, unrolling and fusion can still be naive code
    return found
