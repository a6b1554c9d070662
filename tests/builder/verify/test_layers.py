"""The engine's layers, read from the source: no import cycle anywhere in `builder/`, and each package of
`builder/verify/` imports only the layers below it. Every import counts: module-level, deferred (inside a
function) and type-only, since a deferred import is as much a dependency as any other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
BUILDER = ROOT / "builder"
VERIFY = "builder.verify"

# What each package of builder/verify may import from builder.verify (besides itself). Imports of the rest of
# `builder` are governed by `OUTSIDE_VERIFY` for the children's side.
ALLOWED = {
    "protocol": set(),
    "child": {"protocol"},
    "sandbox": {"protocol", "environment", "milestones"},
    "compile": {"protocol", "sandbox", "environment", "milestones"},
    "judge": {"protocol", "environment"},
    "engine": {"protocol", "sandbox", "compile", "judge", "options", "environment", "milestones"},
    "options": {"protocol"},
    "environment": set(),
    "milestones": set(),
}
# The children's side may use these parts of `builder` (shared, trusted-neutral code); nothing else of it.
CHILD_SIDE_OUTSIDE_VERIFY = ("builder.config", "builder.errors", "builder.tasks", "builder.profile.kernel_names",
                             "builder.profile.torch_profile", "builder.pyast")  # fmt: skip


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in BUILDER.rglob("*.py")}


def imports_of(path: Path, known: set[str]) -> set[str]:
    """Every builder module `path` imports, wherever the import statement stands."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:  # `from package import module` imports the module
                found.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in known else target)
    return {name for name in found if name.startswith("builder") and name in known}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(path, set(known)) - {name} for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def layer(name: str) -> str | None:
    """The package of builder/verify a module belongs to (None: outside builder/verify, or the package itself)."""
    if not name.startswith(VERIFY + "."):
        return None
    return name[len(VERIFY) + 1 :].split(".")[0]


def test_cycle_finder_finds_a_planted_cycle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(edges) == [["a", "b", "c"]]


def test_no_import_cycle_in_builder():
    assert cycles(graph()) == []


def test_every_verify_module_lies_in_a_known_layer():
    unknown = {name for name in modules() if layer(name) is not None and layer(name) not in ALLOWED}
    assert unknown == set()


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_layer_imports_only_the_layers_below_it(package):
    wrong = {
        f"{name} imports {target}"
        for name, targets in graph().items()
        if layer(name) == package
        for target in targets
        if layer(target) not in (None, package) and layer(target) not in ALLOWED[package]
    }
    assert wrong == set()


def test_the_childs_side_reaches_no_parent_module_even_indirectly():
    """What a sandboxed child imports, and everything that imports in turn, stays on the child's side."""
    edges = graph()
    side = {name for name in edges if layer(name) in ("child", "protocol")}
    reached, todo = set(side), list(side)
    while todo:
        for target in edges[todo.pop()]:
            if target not in reached:
                reached.add(target)
                todo.append(target)
    outside = {name for name in reached - side if name not in ("builder", VERIFY)}
    parent = {name for name in outside if not name.startswith(CHILD_SIDE_OUTSIDE_VERIFY)}
    assert parent == set()


def test_the_parent_never_imports_the_childs_code():
    """The parent starts children by module name (`protocol/entry_points.py`); it never loads their code."""
    edges = graph()
    wrong = {f"{name} imports {target}" for name, targets in edges.items() if layer(name) not in ("child", None)
             for target in targets if layer(target) == "child"}  # fmt: skip
    outside = {f"{name} imports {target}" for name, targets in edges.items()
               if not name.startswith(VERIFY) and name != "builder" for target in targets if layer(target) == "child"}  # fmt: skip
    assert wrong | outside == set()
