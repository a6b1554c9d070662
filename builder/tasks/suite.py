"""Discover and describe task files without executing them.

A task file follows the KernelBench problem format (`Model`, `get_inputs`, `get_init_inputs`) and, in
our suite, also a functional form: a top-level `module_fn` and `Model.forward(..., fn=module_fn)`.
Metadata is read from literal top-level assignments with `ast`, so listing a suite runs no task code:

    OP_CATEGORY = "matmul"              # op category (default "other")
    DTYPE = "float32"                   # output dtype the tolerance is chosen for
    TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}   # optional per-task override
    CPU_SIZE = {"N": 256}               # optional: module globals replaced for CPU-sized runs
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder import config, pyast
from builder.errors import TaskError, UsageError

TASK_FILE = re.compile(r"^(\d+)_(\w+)\.py$")
LEVEL_DIR = re.compile(r"^level_?(\d+)$")
REQUIRED = ("Model", "get_inputs", "get_init_inputs")
META_NAMES = ("OP_CATEGORY", "DTYPE", "TOLERANCE", "CPU_SIZE", "LEVEL")


@dataclass(frozen=True)
class Task:
    level: int
    number: int
    name: str
    path: Path
    suite: str = "builtin"
    op_category: str = "other"
    dtype: str = "float32"
    tolerance: dict[str, float] | None = None
    cpu_size: dict[str, Any] = field(default_factory=dict)
    has_functional: bool = False

    @property
    def id(self) -> str:
        return f"{self.level}/{self.number}"

    @property
    def source(self) -> str:
        return self.path.read_text()

    def tolerances(self) -> tuple[float, float]:
        atol, rtol = config.TOLERANCES.get(self.dtype, config.TOLERANCES["float32"])
        if self.tolerance:
            atol = float(self.tolerance.get("atol", atol))
            rtol = float(self.tolerance.get("rtol", rtol))
        return atol, rtol

    def functional_source(self) -> str | None:
        """The `module_fn` definition (with decorators) as written in the task file, or None."""
        if not self.has_functional:
            return None
        text = self.source
        for node in pyast.parse(text).body:
            if isinstance(node, ast.FunctionDef) and node.name == "module_fn":
                return ast.get_source_segment(text, node)
        return None

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "level": self.level,
            "number": self.number,
            "name": self.name,
            "category": self.op_category,
            "dtype": self.dtype,
            "functional": self.has_functional,
            "suite": self.suite,
            "path": str(self.path),
        }


@dataclass
class TaskSuite:
    name: str
    root: Path
    tasks: list[Task]

    def get(self, task_id: str) -> Task:
        for task in self.tasks:
            if task.id == task_id:
                return task
        raise UsageError(f"unknown task '{task_id}' in suite {self.root} (see `kernel-archive tasks`)")

    def select(self, levels: list[int] | None = None, pattern: str | None = None) -> list[Task]:
        chosen = [t for t in self.tasks if not levels or t.level in levels]
        if pattern:
            try:
                rx = re.compile(pattern)
            except re.error as exc:
                raise UsageError(f"--tasks {pattern!r} is not a valid regular expression: {exc}") from None
            chosen = [t for t in chosen if rx.search(t.id) or rx.search(t.name)]
        return chosen


def _literal_meta(tree: ast.Module, path: Path) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in META_NAMES:
                try:
                    meta[name] = ast.literal_eval(node.value)
                except ValueError:
                    raise TaskError(f"{path}: {name} must be a literal value") from None
    return meta


def _has_functional(tree: ast.Module) -> bool:
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    if "module_fn" not in names:
        return False
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "forward":
                    params = [a.arg for a in item.args.args + item.args.kwonlyargs]
                    return "fn" in params
    return False


def is_functional_program(text: str) -> bool:
    """True when `text` is a whole task program in the functional form (Model, get_inputs, get_init_inputs,
    module_fn, and Model.forward taking fn)."""
    try:
        tree = pyast.parse(text)
    except (SyntaxError, ValueError):
        return False
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    return all(name in defined for name in REQUIRED) and _has_functional(tree)


def describe_task_file(path: Path, level: int | None = None, number: int | None = None, suite: str = "builtin") -> Task:
    """Parse one task file into a Task, raising TaskError naming the file and the problem."""
    path = Path(path)
    if not path.is_file():
        raise TaskError(f"{path}: no such task file")
    match = TASK_FILE.match(path.name)
    try:
        text = path.read_text()
        tree = pyast.parse(text, filename=str(path))
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError(f"{path}: unreadable ({exc})") from None
    except SyntaxError as exc:
        raise TaskError(f"{path}: syntax error at line {exc.lineno}: {exc.msg}") from None
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    missing = [name for name in REQUIRED if name not in defined]
    if missing:
        raise TaskError(f"{path}: not a task file (missing {', '.join(missing)})")
    meta = _literal_meta(tree, path)
    if level is None:
        dir_match = LEVEL_DIR.match(path.parent.name)
        level = int(dir_match.group(1)) if dir_match else int(meta.get("LEVEL", 0))
    if number is None:
        number = int(match.group(1)) if match else 0
    name = match.group(2) if match else path.stem
    tolerance = meta.get("TOLERANCE")
    if tolerance is not None and not isinstance(tolerance, dict):
        raise TaskError(f"{path}: TOLERANCE must be a dict like {{'atol': 1e-3, 'rtol': 1e-3}}")
    cpu_size = meta.get("CPU_SIZE") or {}
    if not isinstance(cpu_size, dict):
        raise TaskError(f"{path}: CPU_SIZE must be a dict of module globals")
    return Task(
        level=level,
        number=number,
        name=name,
        path=path.resolve(),
        suite=suite,
        op_category=str(meta.get("OP_CATEGORY", "other")),
        dtype=str(meta.get("DTYPE", "float32")),
        tolerance=tolerance,
        cpu_size=cpu_size,
        has_functional=_has_functional(tree),
    )


def load_suite(path: str | Path | None = None) -> TaskSuite:
    """Load the built-in suite (path None) or an external KernelBench-style checkout."""
    root = Path(path) if path is not None else config.TASKS_DIR
    suite_name = "builtin" if path is None else str(root)
    if not root.is_dir():
        raise UsageError(f"task suite not found: {root} (expected folders level1/, level2/, ...)")
    level_dirs = sorted((int(m.group(1)), d) for d in root.iterdir() if d.is_dir() and (m := LEVEL_DIR.match(d.name)))
    if not level_dirs:
        raise UsageError(f"{root}: no level folders (expected level1/, level2/, ... holding N_name.py files)")
    tasks: list[Task] = []
    for level, directory in level_dirs:
        for file in sorted(directory.glob("*.py")):
            if file.name.startswith("_"):
                continue
            match = TASK_FILE.match(file.name)
            if not match:
                raise TaskError(f"{file}: task files must be named N_name.py")
            tasks.append(describe_task_file(file, level=level, number=int(match.group(1)), suite=suite_name))
    seen: dict[str, Path] = {}
    for task in tasks:
        if task.id in seen:
            raise TaskError(f"{task.path}: task id {task.id} already used by {seen[task.id]}")
        seen[task.id] = task.path
    tasks.sort(key=lambda t: (t.level, t.number))
    return TaskSuite(name=suite_name, root=root.resolve(), tasks=tasks)


def resolve_task(spec: str, suite: str | Path | None = None) -> Task:
    """A task from a suite id (`1/3`) or from the path of a task file."""
    if re.fullmatch(r"\d+/\d+", spec):
        return load_suite(suite).get(spec)
    path = Path(spec)
    if path.suffix == ".py" or path.exists():
        return describe_task_file(path, suite=str(path.parent))
    raise UsageError(f"unknown task '{spec}': give a suite id like 1/3 or a task file path")
