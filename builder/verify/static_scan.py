"""Static scan of candidate source text (runs in the trusted parent: it only reads text).

`scan(source, language) -> set[flag]`:
- `uses_torch_ops`: the source calls PyTorch/ATen compute ops or cuBLAS/cuDNN for its main work
  (matmul, convolution, linear, einsum, torch::nn::functional, ...). Allocation helpers (empty,
  empty_like, zeros, ...) are fine; so is light glue when the file also has its own kernel or loops.
- `host_side_effects`: threads, processes (system/popen/fork/exec), file I/O, sockets, environment.

C/C++/CUDA comments and string literals are blanked first, so a mention there never triggers.
Python (`ModelNew` files) is scanned through its AST.
"""

from __future__ import annotations

import ast
import re

from builder import pyast

_CPP_TOKENS = re.compile(
    r"""
      (?P<line_comment>//[^\n]*)
    | (?P<block_comment>/\*.*?\*/)
    | (?P<raw_string>R"(?P<delim>[^()\\\s]{0,16})\((?:.|\n)*?\)(?P=delim)")
    | (?P<string>"(?:\\.|[^"\\\n])*")
    | (?P<char>'(?:\\.|[^'\\\n])+')
    """,
    re.DOTALL | re.VERBOSE,
)

# Heavy compute: whoever calls these has handed the main work to a library.
_HEAVY_OPS = (
    "matmul|mm|bmm|addmm|addbmm|baddbmm|addmv|mv|dot|einsum|linear|bilinear|tensordot|chain_matmul|"
    "conv\\w*|_convolution|convolution\\w*|cudnn_\\w+|max_pool\\w*|avg_pool\\w*|adaptive_\\w*pool\\w*|"
    "layer_norm|group_norm|batch_norm|instance_norm|rms_norm|softmax|log_softmax|scaled_dot_product_attention|"
    "cross_entropy|nll_loss|mse_loss|kl_div|cumsum|cumprod|sort|topk|lstm|gru"
)
_CPP_HEAVY = re.compile(
    rf"\b(?:at|torch)::(?:native::)?(?:{_HEAVY_OPS})\s*\("
    rf"|\.\s*(?:{_HEAVY_OPS})\s*\("
    r"|\btorch::nn::functional\b|\bF::\w+\s*\("
    r"|\bcublas\w*\s*\(|\bcublasLt\w*\s*\(|\bcudnn\w*\s*\(",
)
# Any other ATen/torch op (not allocation): counts only when the file has no kernel/loops of its own.
_CPP_ALLOCATION = {
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "from_blob", "arange", "tensor", "scalar_tensor", "TensorOptions", "Tensor", "Scalar", "IntArrayRef",
    "Device", "device", "dtype", "kFloat", "kHalf", "kBFloat16", "kInt", "kLong", "kCUDA", "kCPU",
}  # fmt: skip
_CPP_ANY_OP = re.compile(r"\b(?:at|torch)::(\w+)\s*\(")
_CPP_OWN_WORK = re.compile(r"__global__|\bfor\s*\(|\bwhile\s*\(|#\s*pragma\s+omp|\bparallel_for\b")

# remove/rename/open/bind/connect/... are also std:: algorithms and members: only free calls count.
_FREE = r"(?<!::)(?<![\w.>])"
_CPP_SIDE_EFFECTS = re.compile(
    r"\bstd::(?:thread|jthread|async)\b|\bpthread_create\s*\("
    r"|\b(?:system|popen|fork|vfork|execl|execlp|execle|execv|execvp|execvpe|execve|posix_spawnp?)\s*\("
    r"|\b(?:fopen|freopen|fdopen|openat|creat|unlink|mkdir|opendir)\s*\("
    r"|\bstd::(?:ofstream|ifstream|fstream|filesystem)\b|\bstd::experimental::filesystem\b"
    r"|\b(?:socket|gethostbyname|getaddrinfo)\s*\("
    r"|\b(?:getenv|secure_getenv|setenv|unsetenv|putenv|clearenv)\s*\(|\benviron\b"
    r"|\b(?:dlopen|syscall|ptrace)\s*\("
    rf"|{_FREE}(?:open|remove|rename|bind|connect|listen|accept)\s*\("
)


def strip_comments_and_strings(source: str) -> str:
    """Blank C/C++ comments and string/char literals, keeping line breaks (and #include <...>)."""

    def blank(match: re.Match[str]) -> str:
        text = match.group(0)
        if match.group("string") is not None or match.group("raw_string") is not None:
            return '""' + "\n" * text.count("\n")
        if match.group("char") is not None:
            return "' '"
        return " " + "\n" * text.count("\n")

    return _CPP_TOKENS.sub(blank, source)


def _scan_cpp(source: str) -> set[str]:
    code = strip_comments_and_strings(source)
    flags: set[str] = set()
    if _CPP_HEAVY.search(code):
        flags.add("uses_torch_ops")
    elif not _CPP_OWN_WORK.search(code):
        if any(op not in _CPP_ALLOCATION for op in _CPP_ANY_OP.findall(code)):
            flags.add("uses_torch_ops")
    if _CPP_SIDE_EFFECTS.search(code):
        flags.add("host_side_effects")
    return flags


# --- Python (ModelNew) --------------------------------------------------------------------------

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
_PY_HEAVY = set(_HEAVY_OPS.replace("\\w*", "").replace("\\w+", "").split("|")) | {
    "Linear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
    "LayerNorm", "GroupNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "MultiheadAttention",
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
}  # fmt: skip
_PY_NOT_COMPUTE = {
    "manual_seed", "no_grad", "inference_mode", "is_tensor", "device", "Size", "cuda", "synchronize",
    "randn", "rand", "randint", "randn_like", "rand_like", "randint_like", "randperm", "normal",
    "get_rng_state", "set_rng_state", "equal", "is_floating_point", "empty_cache", "current_stream",
}  # fmt: skip
_PY_OWN_KERNEL_HINTS = ("load_inline", "cpp_extension", "triton", "cupy", "numba", "cuda.jit")


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _scan_python(source: str) -> set[str]:
    try:
        tree = pyast.parse(source)
    except SyntaxError:
        return set()  # the child reports the syntax error as compile_error
    flags: set[str] = set()
    heavy = False
    own_kernel = any(hint in source for hint in _PY_OWN_KERNEL_HINTS)
    extensions = _extension_names(tree)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(name.split(".")[0] in _PY_SIDE_EFFECT_MODULES for name in names):
                flags.add("host_side_effects")
            if isinstance(node, ast.ImportFrom) and node.module == "os":
                if any(alias.name in _PY_OS_CALLS for alias in node.names):
                    flags.add("host_side_effects")
        elif isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            if dotted.startswith("os.") and dotted.split(".")[1] in _PY_OS_CALLS:
                flags.add("host_side_effects")
            if dotted.startswith("sys.") and dotted.split(".")[1] in ("modules", "settrace", "setprofile"):
                flags.add("host_side_effects")
        elif isinstance(node, ast.Call):
            name = _dotted(node.func)
            last = name.split(".")[-1]
            if name in _PY_BUILTIN_SIDE_EFFECTS:
                flags.add("host_side_effects")
            if extensions & set(name.split(".")):
                continue  # a call into the candidate's own compiled extension
            rooted = name.split(".")[0] in ("torch", "F", "nn", "functional")
            if (rooted or "." in name) and last in _PY_HEAVY:
                heavy = True
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            heavy = True
    if heavy or (not own_kernel and _calls_torch_compute(tree)):
        flags.add("uses_torch_ops")
    return flags


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


def _calls_torch_compute(tree: ast.AST) -> bool:
    """Any torch.* call outside __init__ other than allocation, random fills and shape helpers (used
    when no own kernel is in sight: then torch does the work)."""
    allowed = _CPP_ALLOCATION | _PY_NOT_COMPUTE
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef) or function.name == "__init__":
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Call):
                name = _dotted(node.func)
                if (
                    name.startswith("torch.")
                    and not name.startswith("torch.nn.")
                    and name.split(".")[-1] not in allowed
                ):
                    return True
    return False


def scan(source: str, language: str) -> set[str]:
    """Flags the source text alone justifies ("cuda"/"cpp"/"c++" or "python")."""
    if language.lower() in ("python", "py"):
        return _scan_python(source)
    return _scan_cpp(source)
