"""A build against the torch headers a kernel needs first (lean where its names fit, then light), the source as
written where those fail (builder/verify/compile/headers.py, compile/extension.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from builder import config
from builder.verify.compile import extension, headers
from builder.verify.compile.extension import BuildPlan, CompileResult, build_extension, build_plans, recall_build
from builder.verify.compile.headers import (
    LEAN_INCLUDE,
    LIGHT_HEADER_TEXT,
    LIGHT_INCLUDE,
    HeaderTries,
    fits_lean,
    lean_header_text,
    lean_variant,
    light_variant,
)

KERNEL = """#include <torch/extension.h>
#include <cuda_runtime.h>

torch::Tensor forward(torch::Tensor x) { return x; }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward); }
"""
# A kernel that names an ATen operator the lean header does not declare: built light first.
NAMES_AN_OPERATOR = KERNEL.replace("{ return x; }", "{ return at::relu(x); }")


@pytest.fixture
def no_lean(monkeypatch):
    """A torch whose `torch/types.h` the lean header cannot be made from: the ladder is light, then as written."""
    monkeypatch.setattr(headers, "lean_header_text", lambda: None)


def test_the_include_becomes_the_light_header_line_for_line():
    light = light_variant(KERNEL)
    assert light is not None and light.count("\n") == KERNEL.count("\n")
    assert light.splitlines()[0] == LIGHT_INCLUDE and "torch/extension.h" not in light
    assert light.splitlines()[1:] == KERNEL.splitlines()[1:]
    for spelling, expected in [
        ("  #  include <torch/extension.h>  ", '  #  include "ka_torch_light.h"  '),
        ('#include "torch/extension.h"  // all of torch', '#include "ka_torch_light.h"  // all of torch'),
        (
            "#include <torch/extension.h> /* a comment that\n goes on */",
            '#include "ka_torch_light.h" /* a comment that',
        ),
    ]:  # either spelling; what follows the header's name on its line is kept as it was
        other = KERNEL.replace("#include <torch/extension.h>", spelling)
        assert light_variant(other).splitlines()[0] == expected
        assert light_variant(other).count("\n") == other.count("\n")
    assert all(f"#include <{name}>" in LIGHT_HEADER_TEXT for name in config.LIGHT_HEADER_INCLUDES)


@pytest.mark.parametrize(
    "source",
    [
        "#include <pybind11/pybind11.h>\nint forward(int x) { return x; }\n",  # no torch header at all
        "#include <torch/extension.hpp>\n" + KERNEL.split("\n", 1)[1],  # another header: built as written
        KERNEL + 'const char* text = R"(\n#include <torch/extension.h>\n)";\n',  # a raw string may hold the line
        'const char* s = "a\\\n#include <torch/extension.h>\n";\n' + KERNEL,  # a spliced line may be in a string
    ],
    ids=["no-torch-header", "another-header", "raw-string", "spliced-line"],
)
def test_sources_a_rewrite_could_change_or_that_lack_the_include_are_built_as_written(source):
    assert light_variant(source) is None and lean_variant(source) is None
    assert build_plans(source) == [BuildPlan(source)]


def test_a_line_inside_a_comment_may_be_rewritten_and_every_include_line_is(no_lean):
    source = "/* an example:\n#include <torch/extension.h>\n*/\n" + KERNEL
    light = light_variant(source)
    assert light is not None and light.count(LIGHT_INCLUDE) == 2 and light.count("\n") == source.count("\n")


def test_the_light_build_is_keyed_with_its_header_and_apart_from_the_source_as_written(monkeypatch, no_lean):
    monkeypatch.setattr(extension.environment, "toolchain", lambda backend: {"cxx": "g++ 13"})
    light, full = build_plans(KERNEL)
    assert light.beside == {config.LIGHT_HEADER_NAME: LIGHT_HEADER_TEXT} and full == BuildPlan(KERNEL)

    def key_of(plan: BuildPlan, beside: dict[str, str] | None = None) -> str:
        return extension._keyed(plan.text, "cpu", False, 0, beside)[0]

    assert extension.build_key(KERNEL, "cpu") == key_of(light, light.beside)
    assert key_of(light, light.beside) not in {key_of(light), key_of(full)}  # the header's text is in the key
    assert key_of(full) == extension.cache_key(KERNEL, ["-O3"], extension.environment.torch_versions()[0], None,
                                               "cpu", {"cxx": "g++ 13"})  # fmt: skip


class PlannedBuilds:
    """`_build_plan` replaced: each plan's result is given by its rung (lean, light or full)."""

    def __init__(self, light: CompileResult, full: CompileResult, lean: CompileResult | None = None) -> None:
        self.results = {"lean": lean, "light": light, "full": full}
        self.built: list[str] = []

    def __call__(self, plan: BuildPlan, language: str, backend: str, **settings) -> CompileResult:
        rung = {LEAN_INCLUDE: "lean", LIGHT_INCLUDE: "light"}.get(plan.text.splitlines()[0], "full")
        self.built.append(rung)
        return self.results[rung]


BUILT = CompileResult(ok=True, library_path="/x.so", compile_s=30.0, cpu_s=31.0)
FAILED = CompileResult(ok=False, error="error: 'Linear' is not a member of 'torch::nn'", compile_s=10.0, cpu_s=9.0)


def test_a_light_build_that_compiles_is_the_build(monkeypatch, no_lean):
    builds = PlannedBuilds(light=BUILT, full=FAILED)
    monkeypatch.setattr(extension, "_build_plan", builds)
    assert build_extension(KERNEL, "cpp", "cpu").ok and builds.built == ["light"]


def test_a_light_build_that_fails_gives_way_to_the_source_as_written_whose_result_stands(monkeypatch, no_lean):
    builds = PlannedBuilds(light=FAILED, full=BUILT)
    monkeypatch.setattr(extension, "_build_plan", builds)
    result = build_extension(KERNEL, "cpp", "cpu")
    assert result.ok and builds.built == ["light", "full"]
    assert (result.compile_s, result.cpu_s) == (40.0, 40.0)  # the failed light build's cost is counted
    both_fail = PlannedBuilds(light=FAILED, full=replace(FAILED, error="error: the source's own"))
    monkeypatch.setattr(extension, "_build_plan", both_fail)
    assert build_extension(KERNEL, "cpp", "cpu").error == "error: the source's own"  # the full build's message


@pytest.mark.parametrize(
    "light",
    [replace(FAILED, timed_out=True), replace(FAILED, infrastructure="the compiler was killed")],
    ids=["timed-out", "machinery"],
)
def test_a_light_build_the_machinery_or_the_clock_ended_is_not_retried(monkeypatch, light, no_lean):
    builds = PlannedBuilds(light=light, full=BUILT)
    monkeypatch.setattr(extension, "_build_plan", builds)
    assert build_extension(KERNEL, "cpp", "cpu") is not None and builds.built == ["light"]


def test_a_shared_build_tries_its_lightest_rung_only_and_a_named_culprit_the_rungs_after_it(monkeypatch, no_lean):
    """A shared build that fails is split by its log; a candidate that log named would fail that rung again."""
    builds = PlannedBuilds(light=FAILED, full=BUILT)
    monkeypatch.setattr(extension, "_build_plan", builds)
    assert not build_extension(KERNEL, "cpp", "cpu", tries=HeaderTries.LIGHTEST_ONLY).ok and builds.built == ["light"]
    assert build_extension(KERNEL, "cpp", "cpu", tries=HeaderTries.AFTER_LIGHTEST).ok
    assert builds.built == ["light", "full"]
    assert build_plans("int f();\n", HeaderTries.LIGHTEST_ONLY) == [BuildPlan("int f();\n")]  # no variant
    assert build_plans("int f();\n", HeaderTries.AFTER_LIGHTEST) == [BuildPlan("int f();\n")]


def test_the_lean_header_is_torchs_own_types_header_without_aten_whole():
    text = lean_header_text()
    assert text is not None and text.startswith("#pragma once\n#define AT_PER_OPERATOR_HEADERS\n")
    assert all(f"#include <{name}>" in text for name in config.LEAN_HEADER_FIRST)
    assert "#include <ATen/ATen.h>" not in text and "#include <torch/library.h>" not in text
    assert "variable_factories.h>" in text and "using namespace at;" in text  # torch's factories and names, as is


def test_a_torch_whose_types_header_is_not_as_expected_gets_no_lean_rung(monkeypatch, tmp_path):
    package = tmp_path / "torch"
    types_h = package / "include" / "torch" / "csrc" / "api" / "include" / "torch" / "types.h"
    types_h.parent.mkdir(parents=True)
    types_h.write_text("#pragma once\n#include <ATen/ATen.h>\nnamespace torch { using namespace at; }\n")
    spec = type("Spec", (), {"origin": str(package / "__init__.py")})()
    monkeypatch.setattr(headers, "find_spec", lambda name: spec)
    headers.lean_header_text.cache_clear()
    try:
        assert lean_header_text() is None  # <torch/library.h> is not where it was looked for
        assert [plan.text.splitlines()[0] for plan in build_plans(KERNEL)] == [LIGHT_INCLUDE, KERNEL.splitlines()[0]]
    finally:
        headers.lean_header_text.cache_clear()


@pytest.mark.parametrize(
    ("source", "fits"),
    [
        (KERNEL, True),
        (KERNEL.replace("{ return x; }", "{ return torch::empty_like(x, x.options().dtype(torch::kFloat32)); }"), True),
        (KERNEL.replace("{ return x; }", "{ return x.relu().contiguous(); }"), True),  # the Tensor's methods
        (NAMES_AN_OPERATOR, False),
        (KERNEL.replace("{ return x; }", "{ return ::torch::nn::functional::relu(x); }"), False),
        (KERNEL + "using namespace torch;\n", False),  # unqualified names are not seen
    ],
    ids=["tensor", "factories-and-dtypes", "methods", "an-operator", "the-frontend", "using-namespace"],
)
def test_a_kernel_is_built_lean_first_where_its_torch_names_fit(source, fits):
    assert fits_lean(source) is fits
    first = [plan.text.splitlines()[0] for plan in build_plans(source)]
    assert first == ([LEAN_INCLUDE] if fits else []) + [LIGHT_INCLUDE, source.splitlines()[0]]


def test_a_source_s_lightest_rung_is_the_first_its_ladder_holds(monkeypatch):
    raw = KERNEL + 'const char* text = R"(x)";\n'
    assert [headers.lightest_rung(s) for s in (KERNEL, NAMES_AN_OPERATOR, raw)] == list(headers.Rung)
    assert [len(build_plans(s)) for s in (KERNEL, NAMES_AN_OPERATOR, raw)] == [3, 2, 1]
    monkeypatch.setattr(headers, "lean_header_text", lambda: None)
    assert headers.lightest_rung(KERNEL) is headers.Rung.LIGHT  # no lean header: no lean rung


def test_the_ladder_lean_light_as_written_and_the_rungs_each_caller_asks_for(monkeypatch):
    lean, light, full = build_plans(KERNEL)
    assert lean.beside == {config.LEAN_HEADER_NAME: lean_header_text()} and full == BuildPlan(KERNEL)
    assert light.beside == {config.LIGHT_HEADER_NAME: LIGHT_HEADER_TEXT}
    assert build_plans(KERNEL, HeaderTries.LIGHTEST_ONLY) == [lean]
    assert build_plans(KERNEL, HeaderTries.AFTER_LIGHTEST) == [light, full]
    assert extension.build_key(KERNEL, "cpu") == extension._keyed(lean.text, "cpu", False, 0, lean.beside)[0]
    builds = PlannedBuilds(lean=FAILED, light=FAILED, full=BUILT)
    monkeypatch.setattr(extension, "_build_plan", builds)
    result = build_extension(KERNEL, "cpp", "cpu")
    assert result.ok and builds.built == ["lean", "light", "full"] and result.cpu_s == 9.0 + 9.0 + 31.0
    builds = PlannedBuilds(lean=BUILT, light=FAILED, full=FAILED)
    monkeypatch.setattr(extension, "_build_plan", builds)
    assert build_extension(KERNEL, "cpp", "cpu").ok and builds.built == ["lean"]


def test_recall_reads_the_lightest_build_that_compiled(tmp_path):
    lean, light, full = build_plans(KERNEL)
    write_cached(tmp_path, lean, {"ok": False, "error": "error: lean"})
    assert recall_build(KERNEL, "cpp", "cpu", cache_dir=tmp_path) is None  # the next rungs are not built yet
    write_cached(tmp_path, light, {"ok": True})
    recalled = recall_build(KERNEL, "cpp", "cpu", cache_dir=tmp_path)
    assert recalled.ok and recalled.cache_key == extension._keyed(light.text, "cpu", False, 0, light.beside)[0]


def write_cached(cache_dir: Path, plan: BuildPlan, data: dict) -> None:
    key = extension._keyed(plan.text, "cpu", False, 0, plan.beside)[0]
    build_dir = cache_dir / "builds" / key[:32]
    build_dir.mkdir(parents=True)
    if data.get("ok"):
        data["library_path"] = str(build_dir / "lib.so")
        (build_dir / "lib.so").write_bytes(b"")
    (build_dir / "result.json").write_text(json.dumps(data))


def test_recall_reads_the_build_as_written_only_where_the_light_one_failed(tmp_path, no_lean):
    light, full = build_plans(KERNEL)
    assert recall_build(KERNEL, "cpp", "cpu", cache_dir=tmp_path) is None
    write_cached(tmp_path, light, {"ok": False, "error": "error: light"})
    assert recall_build(KERNEL, "cpp", "cpu", cache_dir=tmp_path) is None  # the source as written is not built yet
    write_cached(tmp_path, full, {"ok": False, "error": "error: as written"})
    recalled = recall_build(KERNEL, "cpp", "cpu", cache_dir=tmp_path)
    assert recalled is not None and recalled.cached and recalled.error == "error: as written"
    other = KERNEL + "// another\n"
    write_cached(tmp_path, build_plans(other)[0], {"ok": True})
    assert recall_build(other, "cpp", "cpu", cache_dir=tmp_path).ok
    culprit = KERNEL + "// a shared build's log named it: built as written only\n"
    write_cached(tmp_path, BuildPlan(culprit), {"ok": False, "error": "error: its own"})
    assert recall_build(culprit, "cpp", "cpu", cache_dir=tmp_path).error == "error: its own"


NEEDS_THE_FRONTEND = """#include <torch/extension.h>

// torch::nn::functional is torch's C++ frontend: in <torch/extension.h>, not in the light headers.
torch::Tensor forward(torch::Tensor x) { return torch::nn::functional::relu(x); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward); }
"""


@pytest.mark.slow
def test_real_builds_a_kernel_is_built_lean_one_naming_an_operator_light_and_one_that_needs_more_as_written(tmp_path):
    plain = build_extension(KERNEL.replace("#include <cuda_runtime.h>\n", ""), "cpp", "cpu", cache_dir=tmp_path)
    assert plain.ok, plain.error
    assert (Path(plain.library_path).parent / config.LEAN_HEADER_NAME).read_text() == lean_header_text()
    operator = build_extension(NAMES_AN_OPERATOR.replace("#include <cuda_runtime.h>\n", ""), "cpp", "cpu",
                               cache_dir=tmp_path)  # fmt: skip
    assert operator.ok, operator.error
    assert (Path(operator.library_path).parent / config.LIGHT_HEADER_NAME).read_text() == LIGHT_HEADER_TEXT
    frontend = build_extension(NEEDS_THE_FRONTEND, "cpp", "cpu", cache_dir=tmp_path)
    assert frontend.ok, frontend.error
    assert not (Path(frontend.library_path).parent / config.LIGHT_HEADER_NAME).exists()
    light_key = extension.build_key(NEEDS_THE_FRONTEND, "cpu")
    light_result = json.loads((tmp_path / "builds" / light_key[:32] / "result.json").read_text())
    assert not light_result["ok"] and "nn" in light_result["error"]  # it failed, and only the light build did
    recalled = recall_build(NEEDS_THE_FRONTEND, "cpp", "cpu", cache_dir=tmp_path)
    assert recalled.ok and recalled.library_path == frontend.library_path
