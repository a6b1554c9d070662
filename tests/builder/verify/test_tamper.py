"""The fingerprint of torch's surface (child/tamper.py): what counts as a change and what does not.

Each case binds a small module under a `torch.` name, as a submodule of torch would be, takes a fingerprint, changes
one thing and takes another."""

from __future__ import annotations

import sys
import types

import pytest

from builder.verify.child import tamper


def _fixture_module() -> types.ModuleType:
    module = types.ModuleType("torch.ka_fixture")
    source = """
def scale(x, factor=2.0, *, shift=0.0):
    return x * factor + shift

def unused(x):
    return x

class Kernel:
    def forward(self, x):
        return x + 1

    @staticmethod
    def helper(x):
        return x - 1

    @classmethod
    def build(cls):
        return cls()

ratio = 0.5
"""
    exec(compile(source, "<torch.ka_fixture>", "exec"), module.__dict__)
    return module


@pytest.fixture
def fixture_module(monkeypatch):
    module = _fixture_module()
    monkeypatch.setitem(sys.modules, "torch.ka_fixture", module)
    return module


def _changes_after(change, task_module=None) -> list[str]:
    before = tamper.fingerprint(task_module)
    change()
    return tamper.changes(before, tamper.fingerprint(task_module))


def _replacement_code(x, factor=2.0, *, shift=0.0):
    return x


def test_no_change_is_no_change(fixture_module):
    assert _changes_after(lambda: None) == []


@pytest.mark.parametrize(
    ("name", "change"),
    [
        ("torch.ka_fixture.scale", lambda m: setattr(m, "scale", lambda x: x)),
        ("torch.ka_fixture.scale", lambda m: setattr(m.scale, "__code__", _replacement_code.__code__)),
        ("torch.ka_fixture.scale", lambda m: setattr(m.scale, "__defaults__", (1.0,))),
        ("torch.ka_fixture.scale", lambda m: setattr(m.scale, "__kwdefaults__", {"shift": 1.0})),
        ("torch.ka_fixture.Kernel.forward", lambda m: setattr(m.Kernel, "forward", lambda self, x: x)),
        ("torch.ka_fixture.Kernel.helper", lambda m: setattr(m.Kernel.helper, "__code__", (lambda x: x).__code__)),
        (
            "torch.ka_fixture.Kernel.build",
            lambda m: setattr(m.Kernel.build.__func__, "__code__", (lambda cls: None).__code__),
        ),  # fmt: skip
        ("torch.ka_fixture.ratio", lambda m: setattr(m, "ratio", lambda: 0.5)),  # data become a callable
    ],
    ids=["rebound", "code", "defaults", "kwdefaults", "method", "staticmethod", "classmethod", "data-to-callable"],
)
def test_each_kind_of_rebinding_is_named(fixture_module, name, change):
    changed = _changes_after(lambda: change(fixture_module))
    assert len(changed) == 1 and changed[0].startswith("torch functions rebound: ")
    assert name in changed[0]


def test_a_function_bound_again_after_its_name_was_deleted_is_still_the_same_binding(fixture_module):
    """Deleting a name and binding the same function again moves it in the namespace's order: no change. Binding
    another function is one."""

    def rebind_same():
        scale = fixture_module.scale
        del fixture_module.scale
        fixture_module.scale = scale

    assert _changes_after(rebind_same) == []

    def rebind_other():
        del fixture_module.unused
        fixture_module.unused = lambda x: x

    assert "torch.ka_fixture.unused" in _changes_after(rebind_other)[0]


def test_two_names_that_swap_their_functions_are_found_when_the_values_keep_their_order(fixture_module):
    """Deleted and bound again the other way round, the namespace's values keep their order and only its names
    move: both are changes."""
    scale, unused = fixture_module.scale, fixture_module.unused
    for name in ("scale", "unused"):  # the two last names, so that their values end the namespace
        delattr(fixture_module, name)
    fixture_module.scale, fixture_module.unused = scale, unused

    def swap():
        del fixture_module.scale, fixture_module.unused
        fixture_module.unused = scale
        fixture_module.scale = unused

    changed = _changes_after(swap)
    assert changed == ["torch functions rebound: torch.ka_fixture.scale, torch.ka_fixture.unused"]


def test_a_code_swap_is_found_when_new_functions_were_bound_before_it(fixture_module, monkeypatch):
    """A submodule imported between two walks puts its functions among the others: matched by identity then."""
    later = types.ModuleType("torch.ka_fixture_later")
    exec("def late(x):\n    return x\n", later.__dict__)

    def import_then_swap():
        monkeypatch.setitem(sys.modules, "torch.ka_fixture_later", later)
        sys.modules["torch.ka_fixture"] = sys.modules.pop("torch.ka_fixture")  # now after the new module
        fixture_module.unused.__code__ = (lambda x: x + 1).__code__

    changed = _changes_after(import_then_swap)
    assert len(changed) == 1 and "torch.ka_fixture.unused" in changed[0]


def test_data_new_names_and_new_modules_are_no_change(fixture_module, monkeypatch):
    later = types.ModuleType("torch.ka_fixture_later")
    exec("def late(x):\n    return x\n", later.__dict__)

    def harmless():
        fixture_module.ratio = 0.25  # module data: counters and caches change as torch runs
        fixture_module.added = lambda x: x  # a lazily bound name
        fixture_module.Kernel.extra = staticmethod(lambda: None)
        monkeypatch.setitem(sys.modules, "torch.ka_fixture_later", later)

    assert _changes_after(harmless) == []


def test_the_task_module_s_functions_and_classes_are_watched():
    task = types.ModuleType("ka_task_fixture")
    exec(
        "def module_fn(x):\n    return x\n\nclass Model:\n    def forward(self, x, fn=module_fn):\n        return fn(x)\n",
        task.__dict__,
    )
    assert _changes_after(lambda: None, task) == []
    changed = _changes_after(lambda: setattr(task.Model.forward, "__defaults__", (abs,)), task)
    assert "ka_task_fixture.Model.forward" in changed[0]
    changed = _changes_after(lambda: setattr(task, "module_fn", abs), task)
    assert "<task>.module_fn" in changed[0]


def test_global_settings_and_registrations_are_compared_as_before():
    before = {"state": {"default_dtype": "torch.float32"}, "dispatcher": {"aten::mm": "a", "aten::add": "b"}}
    after = {"state": {"default_dtype": "torch.float64"}, "dispatcher": {"aten::mm": "c", "aten::new": "d"}}
    assert tamper.changes(before, after) == [
        "global torch settings changed: default_dtype",
        "operator registrations changed: aten::mm",
    ]
