"""Static scan of a Python `ModelNew` candidate (trusted parent side: reads its AST, runs none of it).

A torch object is read by what it is, whatever name reaches it: `import torch as T`, `from torch import mm as f`,
`mm = torch.mm`, `self.op = F.linear`, `getattr(torch, "mm")`, `__import__("torch")` all resolve to torch's own
dotted name before the rules apply, and a heavy torch object counts wherever it is named (passed to `partial`,
kept as a default argument), not only where it is called. A torch attribute looked up by a name the source
computes (`getattr(torch, name)`) could be any operator and counts as library use. String constants (the C++ a
ModelNew hands to `load_inline`) are read with the C++ rules that count whatever else the file does.

Out of reach of any scan: code built at run time (`eval`, `exec`) and ctypes calls, which are `host_side_effects`.
"""

from __future__ import annotations

import ast
import builtins

from builder import config, pyast
from builder.verify.judge import aten_names
from builder.verify.judge.source_text import code_of, library_calls

_PY_SIDE_EFFECT_MODULES = {
    "subprocess", "socket", "threading", "multiprocessing", "concurrent", "asyncio", "shutil", "urllib",
    "http", "requests", "ftplib", "smtplib", "ctypes", "pty", "signal", "tempfile", "pathlib", "io",
}  # fmt: skip
_PY_OS_CALLS = {
    "system", "popen", "fork", "forkpty", "kill", "killpg", "spawnl", "spawnv", "spawnve", "spawnlp",
    "execl", "execle", "execlp", "execv", "execve", "execvp", "execvpe", "getenv", "putenv", "setenv",
    "unsetenv", "environ", "open", "remove", "unlink", "rename", "makedirs", "mkdir", "listdir", "walk",
    "scandir", "posix_spawn", "getenvb", "environb",
}  # fmt: skip
_PY_BUILTIN_SIDE_EFFECTS = {"open", "exec", "eval", "__import__", "compile", "input", "breakpoint"}
_PY_HEAVY = set(aten_names.HEAVY_OPS.replace("\\w*", "").replace("\\w+", "").split("|")) | {
    "Linear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
    "LayerNorm", "GroupNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "MultiheadAttention",
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
    "__matmul__", "__rmatmul__", "__imatmul__",
}  # fmt: skip
_PY_NOT_COMPUTE = {
    "manual_seed", "no_grad", "inference_mode", "is_tensor", "device", "Size", "cuda", "synchronize",
    "randn", "rand", "randint", "randn_like", "rand_like", "randint_like", "randperm", "normal",
    "get_rng_state", "set_rng_state", "equal", "is_floating_point", "empty_cache", "current_stream",
}  # fmt: skip
_PY_OWN_KERNEL_HINTS = ("load_inline", "cpp_extension", "triton", "cupy", "numba", "cuda.jit")
_IMPORTERS = ("__import__", "importlib.import_module")
_ALIAS_PASSES = 4  # follow `a = torch.mm; b = a; self.c = b` chains


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _constant_text(node: ast.AST) -> str | None:
    """A string the source spells out: a literal, literals joined with `+`, an f-string of literals only."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _constant_text(node.left), _constant_text(node.right)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.JoinedStr):
        parts = [_constant_text(value) for value in node.values]
        return None if any(part is None for part in parts) else "".join(parts)  # type: ignore[arg-type]
    return None


def _torch_rooted(name: str) -> bool:
    return name == "torch" or name.startswith("torch.")


class _Names:
    """The torch object (its dotted name under `torch`) that each local name stands for."""

    def __init__(self, tree: ast.AST, extensions: set[str]) -> None:
        self.aliases: dict[str, str] = {}
        self.star: list[str] = []  # torch modules imported with `*`
        self.dynamic: list[str] = []  # torch attributes looked up by a computed name
        self.extensions = extensions
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if _torch_rooted(alias.name) and alias.asname:
                        self.aliases[alias.asname] = alias.name
            elif isinstance(node, ast.ImportFrom) and _torch_rooted(node.module or ""):
                for alias in node.names:
                    if alias.name == "*":
                        self.star.append(str(node.module))
                    else:
                        self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        assignments = [node for node in ast.walk(tree) if isinstance(node, ast.Assign)]
        for _ in range(_ALIAS_PASSES):
            for node in assignments:
                value = self.resolve(node.value)
                if not value or not (_torch_rooted(value) or value.split(".")[-1] in _PY_HEAVY):
                    continue
                for target in node.targets:
                    name = _dotted(target) if isinstance(target, (ast.Name, ast.Attribute)) else ""
                    if name and name.split(".")[-1] not in self.extensions:
                        self.aliases[name] = value

    def canonical(self, dotted: str) -> str:
        parts = dotted.split(".")
        for end in range(len(parts), 0, -1):
            head = ".".join(parts[:end])
            if head in self.aliases and self.aliases[head] != head:
                return ".".join([self.aliases[head], *parts[end:]])
        if self.star and len(parts) == 1 and parts[0] not in vars(builtins):
            return f"{self.star[0]}.{parts[0]}"
        return dotted

    def resolve(self, node: ast.AST) -> str:
        """The dotted name `node` stands for, torch's own where it reaches a torch object ('' when unknown)."""
        if isinstance(node, ast.Call):
            function = self.resolve(node.func)
            if function == "getattr" and len(node.args) >= 2:
                base, attribute = self.resolve(node.args[0]), _constant_text(node.args[1])
                if base and attribute is not None:
                    return f"{base}.{attribute}"
                if _torch_rooted(base):
                    self.dynamic.append(f"getattr({base}, ...)")
                return ""
            if function in _IMPORTERS and node.args:
                return _constant_text(node.args[0]) or ""
            return ""
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return self.canonical(f"{base}.{node.attr}") if base else ""
        if isinstance(node, ast.Name):
            return self.canonical(node.id)
        return ""


def _heavy_reference(name: str) -> bool:
    """A torch object whose work is the main work (`torch.mm`, `torch.ops.aten.mm.default`, `torch.nn.Linear`)."""
    return _torch_rooted(name) and any(part in _PY_HEAVY for part in name.split(".")[1:])


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _string_library_calls(tree: ast.AST) -> list[str]:
    """Library calls in the C++ the source spells in its strings (docstrings are prose, not code)."""
    prose = _docstrings(tree)
    texts = [node.value for node in ast.walk(tree)
             if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose]  # fmt: skip
    return library_calls(code_of("\n".join(texts))) if texts else []


def scan_python(source: str) -> dict[str, str]:
    try:
        tree = pyast.parse(source)
    except SyntaxError:
        return {}  # the child reports the syntax error as compile_error
    notes: dict[str, str] = {}
    heavy: list[str] = []
    own_kernel = any(hint in source for hint in _PY_OWN_KERNEL_HINTS)
    extensions = _extension_names(tree)
    names = _Names(tree, extensions)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(name.split(".")[0] in _PY_SIDE_EFFECT_MODULES for name in modules):
                notes.setdefault("host_side_effects", f"source imports {', '.join(modules)}")
            if isinstance(node, ast.ImportFrom) and node.module == "os":
                if any(alias.name in _PY_OS_CALLS for alias in node.names):
                    notes.setdefault("host_side_effects", "source imports os functions")
        elif isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            if dotted.startswith("os.") and dotted.split(".")[1] in _PY_OS_CALLS:
                notes.setdefault("host_side_effects", f"source uses {dotted}")
            if dotted.startswith("sys.") and dotted.split(".")[1] in ("modules", "settrace", "setprofile"):
                notes.setdefault("host_side_effects", f"source uses {dotted}")
            if isinstance(node.ctx, ast.Load) and _heavy_reference(resolved := names.resolve(node)):
                heavy.append(resolved)
        elif isinstance(node, ast.Call):
            name = _dotted(node.func)
            if name in _PY_BUILTIN_SIDE_EFFECTS:
                notes.setdefault("host_side_effects", f"source calls {name}")
            if extensions & set(name.split(".")):
                continue  # a call into the candidate's own compiled extension
            resolved = names.resolve(node.func) or name
            last = resolved.split(".")[-1]
            rooted = resolved.split(".")[0] in ("torch", "F", "nn", "functional")
            if (rooted or "." in resolved) and last in _PY_HEAVY:
                heavy.append(resolved)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if _heavy_reference(resolved := names.resolve(node)):
                heavy.append(resolved)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            heavy.append("the @ operator")
    strings = _string_library_calls(tree)
    if heavy:
        notes["uses_torch_ops"] = "source calls " + ", ".join(dict.fromkeys(heavy))
    elif names.dynamic:
        notes["uses_torch_ops"] = "source looks up torch by a computed name: " + ", ".join(names.dynamic)
    elif strings:
        notes["uses_torch_ops"] = "C++ in the source's strings calls " + ", ".join(strings)
    elif not own_kernel and (call := _torch_compute_call(tree, names)):
        notes["uses_torch_ops"] = f"source has no kernel of its own and calls {call}"
    elif not own_kernel and (expression := _tensor_arithmetic(tree)):
        notes["uses_torch_ops"] = f"source has no kernel of its own and computes {expression} with torch's operators"
    return notes


def _extension_names(tree: ast.AST) -> set[str]:
    """Names (variables, attributes) bound to a module built by load_inline/load, directly or by copy."""
    names: set[str] = set()
    assignments = [n for n in ast.walk(tree) if isinstance(n, ast.Assign)]
    for _ in range(3):  # follow `self.ext = ext` chains
        for node in assignments:
            value = node.value
            builds = isinstance(value, ast.Call) and _dotted(value.func).split(".")[-1] in ("load_inline", "load")
            copies = isinstance(value, (ast.Name, ast.Attribute)) and _dotted(value).split(".")[-1] in names
            if builds or copies:
                for target in node.targets:
                    if isinstance(target, (ast.Name, ast.Attribute)):
                        names.add(_dotted(target).split(".")[-1])
    return names


_SHAPE_ATTRIBUTES = {"shape", "size", "dim", "ndim", "numel", "dtype", "device", "stride", "is_contiguous"}
_ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)


def _tensor_arithmetic(tree: ast.AST) -> str | None:
    """Arithmetic on a method's arguments or the module's attributes outside __init__ (`x * self.weight`), as
    source text. With no kernel of the candidate's own in sight those operands are tensors, so torch's operators
    do the work; shape arithmetic (`x.shape[0] * 2`) is not compute."""
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef) or function.name == "__init__":
            continue
        arguments = {arg.arg for arg in function.args.args + function.args.kwonlyargs} - {"self"}
        for _ in range(_ALIAS_PASSES):  # `y = x.clone()` makes y a tensor too
            for node in ast.walk(function):
                if isinstance(node, ast.Assign) and _names_a_tensor(node.value, arguments):
                    arguments |= {target.id for target in node.targets if isinstance(target, ast.Name)}
        for node in ast.walk(function):
            if isinstance(node, ast.BinOp) and isinstance(node.op, _ARITHMETIC):
                operands = [node.left, node.right]
            elif isinstance(node, ast.AugAssign) and isinstance(node.op, _ARITHMETIC):
                operands = [node.target, node.value]
            elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
                operands = [node.operand]
            else:
                continue
            if any(_names_a_tensor(operand, arguments) for operand in operands):
                return ast.unparse(node)
    return None


def _names_a_tensor(node: ast.AST, arguments: set[str]) -> bool:
    """An argument or `self.<attribute>` used as a value, not only for its shape or dtype."""
    if isinstance(node, ast.Name):
        return node.id in arguments
    if isinstance(node, ast.Attribute):
        if node.attr in _SHAPE_ATTRIBUTES:
            return False
        return isinstance(node.value, ast.Name) and node.value.id == "self" or _names_a_tensor(node.value, arguments)
    if isinstance(node, ast.Subscript):
        return _names_a_tensor(node.value, arguments)
    if isinstance(node, ast.Call):
        return (
            isinstance(node.func, ast.Attribute)
            and node.func.attr not in _SHAPE_ATTRIBUTES
            and (_names_a_tensor(node.func.value, arguments))
        )
    if isinstance(node, (ast.BinOp, ast.UnaryOp)):
        return any(
            _names_a_tensor(child, arguments) for child in ast.iter_child_nodes(node) if isinstance(child, ast.expr)
        )
    return False


def _torch_compute_call(tree: ast.AST, names: _Names) -> str | None:
    """A torch.* call outside __init__ other than allocation, random fills and shape helpers (used when no own
    kernel is in sight: then torch does the work), by its torch name."""
    allowed = config.TORCH_ALLOCATION_NAMES | _PY_NOT_COMPUTE
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef) or function.name == "__init__":
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Call):
                name = names.resolve(node.func) or _dotted(node.func)
                if (
                    name.startswith("torch.")
                    and not name.startswith("torch.nn.")
                    and name.split(".")[-1] not in allowed
                ):
                    return name
    return None
