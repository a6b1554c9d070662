"""The `fusion` strategy tag: does one kernel compute several ops of the reference?

Definition (docs/embeddings.md, shared with the bundled manifests): a kernel fuses when it computes two
or more ops of the task's reference and hands the intermediate on in registers or shared memory, not
through global memory. An op is a torch function or tensor operator of `module_fn`, with three
conventions: a composite function (F.layer_norm, softmax, F.cross_entropy, ...) is one op; a linear or
conv layer's own bias, a constant scale and an index mask belong to it; and a chain of elementwise
arithmetic (`a * b + c`, `x * scale + shift`) is one op, because it is one pass in any implementation.

The reference is not part of a kernel's source, so the rule reads kinds of computation in each kernel
(a `__global__` body plus the `__device__` helpers it calls; the whole file for CPU code):

- contraction: a product accumulated with `+=` that reads an array (`acc += x[k] * w[k]`,
  `acc[i] += xp[..] * wv`, `__ldg`), an accumulating `fma`, or a tensor-core mma;
- activation: an activation or transcendental call, a ReLU (`fmaxf(x, 0)`, `x > 0 ? x : 0`) or a
  clamp (`fminf(fmaxf(x, lo), hi)`), except a variance clamped at 0 before its square root;
- normalisation: `rsqrt`, an `eps`, or statistics applied (`(x - mean) * rstd`, `(x[i] - st[..]) * st[..]`);
- elementwise: two different arrays read at the same index and combined (`x[c] + r[c]`, `p[i] - t[i]`),
  or a tensor added at the index the output is stored at (`y[idx] = ... + residual[idx]`); accumulated
  with `+=` it is also a reduction (an elementwise op followed by a sum or mean), and so is an
  accumulation that subtracts values of two arrays at one index through locals (the KL term);
- pooling: a max over two elements of one array (`fmaxf(p[0], p[1])`);
- reduction after another op: a running max (`m = fmaxf(m, v)`) in a kernel that contracts, or a sum of
  activations (`s += 1 / (1 + expf(-v))`; a sum of bare `exp` is part of softmax or log-sum-exp);
- a second contraction over the first one's results kept in a register or shared buffer.

Two or more kinds make `fusion`. A reduction alone is not a kind (softmax, norms and plain reductions
are one op however many passes they make).
"""

from __future__ import annotations

import re
from collections.abc import Collection

from builder.embed.kernel_scan import kernel_bodies, kernel_pointer_params, match_close, statements

_NAMED_ACTIVATION = r"\b(?:relu|gelu|silu|swish|sigmoid|mish|softplus|elu|selu|leaky\w*|hardswish|hardtanh)\w*\s*\("
_ACTIVATION = re.compile(
    _NAMED_ACTIVATION + r"|\b(?:tanhf?|erff?|__expf|expf|exp|exp2f|__tanhf)\s*\("
    r"|>\s*0(?:\.0*)?f?\s*\?\s*\w+\s*:\s*0(?:\.0*)?f?\b"
    r"|\b(?:fmax\w*|max)\s*\(\s*0(?:\.0*)?f?\s*,"
    r"|\b(?:fminf?|min)\s*\(\s*(?:fmaxf?|max)\s*\(|\b(?:fmaxf?|max)\s*\(\s*(?:fminf?|min)\s*\("
)
_NORMALISATION = re.compile(
    r"\b(?:rsqrtf?|__frsqrt_rn)\s*\(|\beps(?:ilon)?\b"
    # statistics computed by an earlier kernel and applied: `(x - mean) * rstd`, `(x[i] - st[..]) * st[..]`
    r"|\(\s*[^()]*-\s*(?:mean|mu)\w*\s*\)\s*\*\s*(?:rstd|inv_std|istd|rsigma)\w*\b"
    r"|\(\s*\w+\s*\[[^\]]*\]\s*-\s*(\w+)\s*\[[^\]]*\]\s*\)\s*\*\s*\1\s*\["
)
_VARIANCE_CLAMP = re.compile(r"\b(\w+)\s*=\s*(?:fmaxf?|max)\s*\([^;]*,\s*0(?:\.0*)?f?\s*\)\s*$")
_MMA = re.compile(r"mma_sync\s*\(|\bmma\.sync\b|\bwgmma\b")
_FMA_ACCUMULATE = re.compile(r"\b(\w+)\s*=\s*(?:fmaf?|__fmaf?_r\w)\s*\([^;]*,\s*\1\s*\)")
_PRODUCT = re.compile(r"\b([A-Za-z_]\w*)\s*((?:\[\])*)\s*\*\s*([A-Za-z_]\w*)\s*((?:\[\])*)")
_SAME_INDEX_PAIR = re.compile(r"\b(\w+)\s*\[([^\[\];]+)\]\s*([-+*/])\s*(\w+)\s*\[\2\]")
_STORE = re.compile(r"^(\w+)\s*\[([^\[\]=;]+)\]\s*=(?!=)")
_ADDED_LAST = re.compile(r"\+\s*(\w+)\s*\[([^\[\]=;]+)\]\s*\)?\s*$")
# An activation other than a bare exp (softmax and log-sum-exp accumulate exp as part of one op).
_NON_EXP_ACTIVATION = re.compile(
    _NAMED_ACTIVATION
    + r"|\b(?:tanhf?|erff?|__tanhf)\s*\(|\b1(?:\.0*)?f?\s*/\s*\(\s*1(?:\.0*)?f?\s*\+\s*(?:__)?expf?\s*\(\s*-"
    r"|\b(?:fmax\w*|max)\s*\(\s*0(?:\.0*)?f?\s*,"
)
# A window max over two elements of one array (`fmaxf(p[0], p[1])`): max pooling, an op of its own.
_WINDOW_MAX = re.compile(r"\b(?:fmaxf?|max)\s*\(\s*(\w+)\s*\[[^\]]*\]\s*,\s*\1\s*\[")
_RUNNING_MAX = re.compile(r"\b(\w+)\s*=\s*(?:fmaxf?|max)\s*\(\s*(?:\1\s*,|[^;]*,\s*\1\s*\))")
_ACCUMULATION = re.compile(r"^(?P<lhs>[^=;]*?)\+=(?P<rhs>.*)$", re.DOTALL)


def fused(code: str) -> bool:
    """Whether any kernel of the (comment-free) code computes two or more kinds of op."""
    bodies = kernel_bodies(code) or [code]
    pointers = kernel_pointer_params(code)
    return any(len(op_kinds(body, pointers)) >= 2 for body in bodies)


def op_kinds(body: str, pointers: Collection[str] = ()) -> set[str]:
    """The kinds of computation one kernel body performs (see the module docstring)."""
    pieces = statements(body)
    kinds = set()
    accumulators, contraction_operands = _contractions(pieces)
    if accumulators or _FMA_ACCUMULATE.search(body) or _MMA.search(body):
        kinds.add("contraction")
    activations = "\n".join(p for p in pieces if not _is_variance_clamp(p, body))
    if _ACTIVATION.search(activations) or _has_relu_max(activations):
        kinds.add("activation")
    if _NORMALISATION.search(body):
        kinds.add("normalisation")
    for piece in pieces:
        accumulation = _ACCUMULATION.match(piece)
        for pair in _SAME_INDEX_PAIR.finditer(piece):
            if pair.group(1) == pair.group(4) or _binds_tighter_on_the_left(piece, pair):
                continue
            if accumulation and pair.group(3) == "*":
                continue  # an accumulated product of two arrays is a contraction, found above
            kinds.add("elementwise")
            if accumulation:
                kinds.add("reduction")
    if _reduces_a_difference_of_two_tensors(pieces):
        kinds |= {"elementwise", "reduction"}
    if _WINDOW_MAX.search(body):
        kinds.add("pooling")
    accumulated = [acc.group("rhs") for p in pieces if (acc := _ACCUMULATION.match(p))]
    if any(_NON_EXP_ACTIVATION.search(rhs) or _has_relu_max(rhs) for rhs in accumulated):
        kinds.add("reduction")  # a sum of activations: the activation and the reduction are two ops
    if _adds_tensor_at_output_index(pieces, pointers):
        kinds.add("elementwise")
    if "contraction" in kinds and _RUNNING_MAX.search(body):
        kinds.add("reduction")
    if _chained_contraction(pieces, accumulators, contraction_operands, pointers):
        kinds.add("second contraction")
    return kinds


_LOCAL_DEFINITION = re.compile(r"(?:^|,)\s*(?:[\w:<>]+\s+)*?(\w+)\s*=(?!=)\s*((?:[^,()]|\([^()]*\))+)")


def _reduces_a_difference_of_two_tensors(pieces: list[str]) -> bool:
    """An accumulation that, once the locals it uses are replaced by their definitions, subtracts values
    read from two different arrays at the same index: `acc += expf(lq) * (lq - lp)` with
    `lp = pr[c] - lse_p, lq = tr[c] - lse_q` is an elementwise op of two tensors followed by a sum."""
    definitions: dict[str, str] = {}
    for piece in pieces:
        accumulation = _ACCUMULATION.match(piece)
        if accumulation is None:
            definitions.update(_LOCAL_DEFINITION.findall(piece))
            continue
        expression = accumulation.group("rhs")
        for _ in range(2):  # two levels: locals defined from locals
            expression = re.sub(
                r"\b\w+\b",
                lambda m: f"({definitions[m.group()]})" if m.group() in definitions else m.group(),
                expression,
            )
        by_index: dict[str, set[str]] = {}
        for array, index in re.findall(r"\b(\w+)\s*\[([^\[\]]+)\]", expression):
            by_index.setdefault(index.strip(), set()).add(array)
        subtracts = "-" in _empty_brackets(expression)  # index arithmetic (`x[i - 1]`) is not data
        if subtracts and any(len(arrays) >= 2 for arrays in by_index.values()):
            return True
    return False


def _contractions(pieces: list[str]) -> tuple[set[str], set[str]]:
    """(accumulator names, array names read as factors) of the `acc += a[..] * b` statements."""
    accumulators: set[str] = set()
    operands: set[str] = set()
    for piece in pieces:
        match = _ACCUMULATION.match(piece)
        if not match:
            continue
        rhs = _empty_brackets(re.sub(r"__ldg\s*\(\s*&?\s*(\w+\s*\[[^;]*?\])\s*\)", r"\1", match.group("rhs")))
        for product in _PRODUCT.finditer(rhs):
            left, left_index, right, right_index = product.groups()
            if left != right and (left_index or right_index):
                accumulators.add(re.split(r"[\[\s]", match.group("lhs").strip())[0])
                operands |= {name for name, index in ((left, left_index), (right, right_index)) if index}
    return accumulators, operands


def _chained_contraction(
    pieces: list[str], accumulators: set[str], operands: set[str], pointers: Collection[str]
) -> bool:
    """A contraction result stored in a non-global buffer (`dwv[c] = acc`) that a contraction then reads."""
    if not accumulators:
        return False
    uses_accumulator = re.compile(r"\b(?:" + "|".join(map(re.escape, accumulators)) + r")\b")
    for piece in pieces:
        store = re.match(r"^(\w+)\s*\[[^=]*\]\s*=(?!=)(.*)$", piece, re.DOTALL)
        if store and store.group(1) not in pointers and store.group(1) in operands:
            if uses_accumulator.search(store.group(2)):
                return True
    return False


def _adds_tensor_at_output_index(pieces: list[str], pointers: Collection[str]) -> bool:
    """`... + residual[idx]` as the last term, where a kernel output is stored at that same `[idx]`: another
    tensor of the output's shape added (a bias is read at a feature index, `bias[col]`, not at `idx`;
    a shift whose scale partner is read at the same index, `* w[c] + b[c]`, is a norm's affine)."""
    stores = {(m.group(1), m.group(2).strip()) for p in pieces if (m := _STORE.match(p)) and m.group(1) in pointers}
    for piece in pieces:
        added = _ADDED_LAST.search(piece)
        if added and added.group(1) in pointers:
            index = added.group(2).strip()
            partner = rf"\b(?!{re.escape(added.group(1))}\b)\w+\s*\[\s*{re.escape(index)}\s*\]"
            if re.search(rf"{partner}\s*\*|\*\s*{partner}", piece):
                continue  # `* w[c] + b[c]`: an affine scale/shift pair of parameters, not a residual
            if any(out != added.group(1) and out_index == index for out, out_index in stores):
                return True
    return False


_MAX_CALL = re.compile(r"\b(?:fmax\w*|max)\s*\(")


def _has_relu_max(text: str) -> bool:
    """`fmaxf(<anything, nested calls included>, 0)`: a ReLU written as a max with zero."""
    for call in _MAX_CALL.finditer(text):
        args = _flatten(text[call.end() : match_close(text, call.end() - 1, "(", ")") - 1]).split(",")
        if len(args) == 2 and re.fullmatch(r"\s*0(?:\.0*)?f?\s*", args[1]):
            return True
    return False


def _flatten(text: str) -> str:
    """Nested parentheses removed innermost first, so commas that separate top-level arguments remain."""
    while True:
        reduced = re.sub(r"\([^()]*\)", "", text)
        if reduced == text:
            return text
        text = reduced


def _is_variance_clamp(piece: str, body: str) -> bool:
    """`var = fmaxf(E[x^2] - mean^2, 0)` before a square root is part of a normalisation, not a ReLU."""
    match = _VARIANCE_CLAMP.search(piece)
    return bool(match) and bool(re.search(rf"\b(?:rsqrtf?|sqrtf?)\s*\([^;]*\b{re.escape(match.group(1))}\b", body))


def _binds_tighter_on_the_left(piece: str, pair: re.Match[str]) -> bool:
    """In `g[c] * v + b[c]`-like `... * w[c] + b[c]` or `b[c] - m[c] * a` the `+`/`-` takes a product as one
    operand, not the two arrays: not a two-array elementwise op."""
    before, after = piece[: pair.start()].rstrip(), piece[pair.end() :].lstrip()
    return pair.group(3) in "+-" and (before.endswith(("*", "/")) or after.startswith(("*", "/")))


def _empty_brackets(text: str) -> str:
    """`x[(i + 1) * n]` -> `x[]`, nested brackets included, so index arithmetic never looks like data."""
    out, depth = [], 0
    for char in text:
        if char == "[":
            if depth == 0:
                out.append("[")
            depth += 1
        elif char == "]" and depth:
            depth -= 1
            if depth == 0:
                out.append("]")
        elif depth == 0:
            out.append(char)
    return "".join(out)
