"""What the kernel page states beside a speedup, read from the record: the dtype and input shapes of the task
(parsed from its reference code, never run) and a compile error's first error line with its paths shortened."""

from __future__ import annotations

import ast
import operator
import re

_SIZE_CALLS = {"randn", "rand", "zeros", "ones", "empty", "randn_like", "full"}  # torch.X(*shape, ...)
_SHAPE_KEYWORD_CALLS = {"randint"}  # torch.randint(low, high, size) / size=...
_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Pow: operator.pow,
}
# An absolute or build-relative path to a source file, as compilers print it before a line number.
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[\w.+~-]*/)+([\w.+-]+\.(?:cu|cuh|cpp|cc|cxx|c|h|hpp|py|o|so))")
_DIAGNOSTIC = re.compile(r"\berror\s*:|\berror\s+[A-Z]?\d+\s*:", re.IGNORECASE)  # `error:`, `error C2065:`
_ANY_ERROR = re.compile(r"\berror\b|exception|failed", re.IGNORECASE)


def reference_facts(code: str | None) -> dict[str, object]:
    """{'dtype': 'float32' or None, 'shapes': ['16×32×256×256', ...]} from a task's module code; what cannot be
    read statically is left out rather than guessed."""
    facts: dict[str, object] = {"dtype": None, "shapes": []}
    if not code:
        return facts
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return facts
    names: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = _evaluate(node.value, names)
            if value is not None:
                names[node.targets[0].id] = value
    if isinstance(names.get("DTYPE"), str):
        facts["dtype"] = names["DTYPE"]
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "get_inputs":
            facts["shapes"] = _input_shapes(node, names)
    return facts


def _input_shapes(function: ast.FunctionDef, names: dict[str, object]) -> list[str]:
    local = dict(names)
    shapes: list[str] = []
    for node in function.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = _evaluate(node.value, local)
            if value is not None:
                local[node.targets[0].id] = value
        if isinstance(node, ast.Return) and isinstance(node.value, (ast.List, ast.Tuple)):
            for item in node.value.elts:
                shape = _call_shape(item, local)
                if shape:
                    shapes.append("×".join(str(d) for d in shape))
    return shapes


def _call_shape(node: ast.AST, names: dict[str, object]) -> list[int] | None:
    if not isinstance(node, ast.Call):
        return None
    func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
    args = node.args
    if func in _SHAPE_KEYWORD_CALLS:
        size = next((k.value for k in node.keywords if k.arg == "size"), args[2] if len(args) > 2 else None)
        args = [size] if size is not None else []
    elif func not in _SIZE_CALLS:
        return None
    if len(args) == 1 and isinstance(args[0], (ast.Tuple, ast.List)):
        args = list(args[0].elts)
    dims = [_evaluate(a, names) for a in args]
    if not dims or not all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
        return None
    return dims


def _evaluate(node: ast.AST, names: dict[str, object]) -> object:
    """Constants, names already bound and integer arithmetic; anything else is None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str)):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _evaluate(node.left, names), _evaluate(node.right, names)
        if isinstance(left, int) and isinstance(right, int) and not (isinstance(node.op, ast.Pow) and right > 64):
            try:
                return _OPS[type(node.op)](left, right)
            except ZeroDivisionError:
                return None
    return None


def shorten_paths(text: str) -> str:
    """Build paths reduced to their file names: `/tmp/ka-build/3f2a.../kernel.cu(12): error` -> `kernel.cu(12): error`."""
    return _PATH.sub(r"\1", text)


def first_error_line(error: str | None) -> str | None:
    """The compiler's first diagnostic (`file.cu(12): error: ...`), else the first line naming an error, else the
    first line; paths shortened; None without an error. A build wrapper's own lines ("Error building
    extension", the nvcc command) come first in the text but say nothing about the kernel."""
    if not error:
        return None
    lines = [line.strip() for line in shorten_paths(error).splitlines() if line.strip()]
    if not lines:
        return None
    return next(
        (line for line in lines if _DIAGNOSTIC.search(line)),
        next((line for line in lines if _ANY_ERROR.search(line)), lines[0]),
    )
