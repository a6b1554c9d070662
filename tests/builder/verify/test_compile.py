"""Sandboxed, cached compilation and shared builds (CPU extensions).

Builds are the slow part of this suite (~20-40 s each on a 2-core machine), so the fixture sources
include only pybind11 (no torch headers) and every build is session-scoped and shared between tests.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest

from builder.candidates import Candidate
from builder.verify.compile import batching, headers, shared_source
from builder.verify.compile.extension import (
    CompileResult,
    build_extension,
    compiler_excerpt,
    recall_build,
    remember_members,
)
from builder.verify.engine.one_kernel import compile_candidate
from builder.verify.options import VerifyOptions
from builder.verify.sandbox.process import SandboxCancelled, run_sandboxed

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "sandbox"
# The tests that use a finished real build (the session's shared builds, ~20-40 s each on 2 cores, or a rebuild) run
# with `make test-slow`; the planning, wrapping, bisecting and log-reading tests (fake builds) and the builds stopped
# within a second stay in `make test`.
real_build = pytest.mark.slow


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("compile-cache")


@pytest.fixture(scope="session")
def build(cache_dir):
    def run(source: str, language: str):
        return build_extension(source, language, "cpu", cache_dir=cache_dir, timeout_s=300)

    return run


@pytest.fixture(scope="session")
def shared_pair(build, cache_dir):
    """Two safe candidates: one shared build, noted for each member."""
    sources = [(fixture("add_one.cpp"), "cpp"), (fixture("times_two.cpp"), "cpp")]
    return batching.compile_many(sources, build, remember=partial(remember_members, backend="cpu", cache_dir=cache_dir))


@pytest.fixture(scope="session")
def mixed_batch(build):
    """A macro candidate (built alone) and a batch with a broken candidate (bisected)."""
    sources = [(fixture("add_three.cpp"), "cpp"), (fixture("uses_define.cpp"), "cpp"), (fixture("broken.cpp"), "cpp")]
    with ThreadPoolExecutor(2) as executor:
        return batching.compile_many(sources, build, executor=executor)


def call_forward(library_path: str, module_name: str, calls: list[tuple[str, int]]) -> list[int]:
    """Load the built module in a sandboxed child (never in this process) and call each `symbol(value)`."""
    code = (
        "import importlib.util, sys\n"
        "import torch  # extensions link against libtorch\n"
        "spec = importlib.util.spec_from_file_location(sys.argv[2], sys.argv[1])\n"
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
        "for symbol, value in zip(sys.argv[3::2], sys.argv[4::2]):\n"
        "    target = module\n"
        "    for part in symbol.split('.'): target = getattr(target, part)\n"
        "    print('RESULT', target(int(value)))\n"
    )
    scratch = Path(library_path).parent / "call-scratch"
    argv = [sys.executable, "-c", code, library_path, module_name]
    for symbol, value in calls:
        argv += [symbol, str(value)]
    outcome = run_sandboxed(argv, scratch, 120, ro_binds=[Path(library_path).parent])
    assert outcome.returncode == 0, outcome.stderr_tail
    return [int(line.split()[1]) for line in outcome.stdout_tail.splitlines() if line.startswith("RESULT")]


@real_build
def test_two_good_candidates_share_one_build_and_both_work(shared_pair):
    first, second = shared_pair
    assert first.ok and second.ok, (first.error, second.error)
    assert first.library_path == second.library_path and first.batch_size == second.batch_size == 2
    assert (first.symbol, second.symbol) == ("c0.forward", "c1.forward")
    assert call_forward(first.library_path, first.module_name, [(first.symbol, 41), (second.symbol, 21)]) == [42, 42]


@real_build
def test_candidate_with_define_is_built_alone(mixed_batch):
    _, with_define, _ = mixed_batch
    assert with_define.ok, with_define.error
    assert with_define.batch_size == 1 and with_define.symbol == "forward"
    assert call_forward(with_define.library_path, with_define.module_name, [("forward", 5)]) == [5 + 7]


@real_build
def test_broken_candidate_does_not_fail_its_batch_and_gets_its_own_message(mixed_batch):
    good, with_define, broken = mixed_batch
    assert good.ok, good.error
    assert good.library_path != with_define.library_path and good.symbol == "forward"
    assert call_forward(good.library_path, good.module_name, [("forward", 1)]) == [4]
    assert not broken.ok and broken.library_path is None
    assert "not_declared_anywhere" in broken.error and "error" in broken.error
    assert "ka_c0" not in broken.error  # the message is from its own build, not the failed batch


@real_build
def test_second_compile_is_a_cache_hit(build, mixed_batch):
    first = mixed_batch[0]
    again = build(fixture("add_three.cpp"), "cpp")
    assert again.cached and not first.cached
    assert again.compile_s == 0.0 and again.library_path == first.library_path and again.ok
    assert first.cpu_s > 0 and again.cpu_s == 0.0  # compile core-seconds are reported by the build itself
    failed_again = build(fixture("broken.cpp"), "cpp")
    assert failed_again.cached and not failed_again.ok and "not_declared_anywhere" in failed_again.error


@real_build
def test_a_member_of_a_shared_build_is_found_again_however_the_next_run_batches_it(shared_pair, mixed_batch, cache_dir):
    """The pair again in the other order (another shared source, another key) and the broken candidate beside
    them: nothing is built, each gets the build it had, the failure its own message."""
    recall = partial(recall_build, backend="cpu", cache_dir=cache_dir)
    sources = [(fixture("times_two.cpp"), "cpp"), (fixture("broken.cpp"), "cpp"), (fixture("add_one.cpp"), "cpp")]
    built: list[str] = []

    def must_not_build(source: str, language: str) -> CompileResult:
        built.append(source)
        return CompileResult(ok=False, error="built again")

    times_two, broken, add_one = batching.compile_many(sources, must_not_build, recall=recall)
    assert built == []
    assert (add_one.library_path, add_one.symbol, add_one.batch_size) == (shared_pair[0].library_path, "c0.forward", 2)
    assert times_two.symbol == "c1.forward" and times_two.cached and add_one.cached
    assert call_forward(add_one.library_path, add_one.module_name, [(add_one.symbol, 1), (times_two.symbol, 5)]) == [
        2,
        10,
    ]
    assert not broken.ok and broken.cached and "not_declared_anywhere" in broken.error
    assert recall(fixture("uses_define.cpp") + "// never built\n", "cpp") is None


@real_build
def test_one_candidate_verified_alone_uses_the_shared_build_it_was_in(shared_pair, cache_dir):
    """`kernel-archive verify` (and the Ray executor) compile one candidate: a kernel from a build is not rebuilt."""
    candidate = Candidate(task_id="1/1", source=fixture("times_two.cpp"), language="cpp", kernel_name="times_two")
    compiled = compile_candidate(candidate, None, VerifyOptions(backend="cpu", build_cache_dir=cache_dir))
    assert compiled.cached and compiled.library_path == shared_pair[1].library_path and compiled.symbol == "c1.forward"


@real_build
def test_a_member_is_not_recalled_from_a_shared_build_that_is_gone_or_failed(shared_pair, mixed_batch, cache_dir):
    """A member entry whose shared build was removed, or points at a failed build, is no build: build it again."""
    gone = fixture("add_one.cpp") + "// its shared build was removed\n"
    remember_members(replace(shared_pair[0], cache_key="0" * 64), [(gone, "c0.")], "cpu", cache_dir=cache_dir)
    assert recall_build(gone, "cpp", "cpu", cache_dir=cache_dir) is None
    failed = fixture("add_one.cpp") + "// its shared build failed\n"
    remember_members(replace(shared_pair[0], cache_key=mixed_batch[2].cache_key), [(failed, "c0.")], "cpu",
                     cache_dir=cache_dir)  # fmt: skip
    assert recall_build(failed, "cpp", "cpu", cache_dir=cache_dir) is None
    remember_members(CompileResult(ok=False, cache_key="1" * 64), [(failed, "c0.")], "cpu", cache_dir=cache_dir / "x")
    assert not (cache_dir / "x").exists()  # a failed shared build notes nobody


def test_compile_timeout_is_reported_and_not_cached(tmp_path):
    source = fixture("add_one.cpp") + "\n// timeout probe\n"
    result = build_extension(source, "cpp", "cpu", cache_dir=tmp_path, timeout_s=0.5)
    assert not result.ok and result.timed_out and "compile" in result.error
    (cached_result,) = [p for p in (tmp_path / "builds").iterdir() if p.is_dir()]
    assert not (cached_result / "result.json").exists()


def test_cancelled_compile_raises_and_caches_nothing(tmp_path):
    # A build interrupted mid-compile (SIGTERM, Ctrl-C) must not leave a made-up failure in the cache that
    # the resumed build would then record as the candidate's compile error.
    source = fixture("add_one.cpp") + "\n// cancel probe\n"
    cancel = threading.Event()
    threading.Timer(1.0, cancel.set).start()
    started = time.monotonic()
    with pytest.raises(SandboxCancelled):
        build_extension(source, "cpp", "cpu", cache_dir=tmp_path, timeout_s=240, cancel=cancel)
    assert time.monotonic() - started < 15  # not the ~20-40 s the compile takes
    (build_dir,) = [p for p in (tmp_path / "builds").iterdir() if p.is_dir()]
    assert not (build_dir / "result.json").exists()


def test_plan_keeps_unsafe_candidates_alone_with_a_reason():
    sources = [(fixture("add_one.cpp"), "cpp"), (fixture("uses_define.cpp"), "cpp"), ("print(1)", "python"),
               (fixture("times_two.cpp"), "cpp")]  # fmt: skip
    batches, alone, reasons = batching.plan_batches(sources, batch_size=8)
    assert [[index for index, _ in group] for group in batches] == [[0, 3]]
    assert alone == [1] and "#define" in reasons[1]


@pytest.mark.parametrize(
    "count, largest, workers, first, sizes",
    [
        (96, 16, 8, None, [12] * 8),  # an even share of the workers, no more than the largest
        (96, 16, 4, None, [16] * 6),  # the largest
        (96, 16, 8, 4, [4, 8, 12, 12, 12, 12, 12, 12, 12]),  # a ramp up to the share
        (96, 16, 8, 1, [1, 2, 4, 8, 12, 12, 12, 12, 12, 12, 9]),  # the first alone: its error is its own
        (5, 16, 8, 4, [1, 1, 1, 1, 1]),  # fewer candidates than workers: each alone, all at once
        (10, 16, 1, 2, [2, 4, 4]),  # the ramp ends where the candidates do
        (0, 16, 8, 4, []),
    ],
)
def test_batch_sizes_share_the_workers_and_ramp_up_from_the_first(count, largest, workers, first, sizes):
    assert batching.batch_sizes(count, largest, workers, first) == sizes
    assert sum(sizes) == count


def test_plan_cuts_each_language_by_the_sizes_in_order():
    sources = [(fixture("add_one.cpp"), "cpp")] * 6 + [("print(1)", "python")] + [(fixture("times_two.cpp"), "cpp")]
    batches, alone, _ = batching.plan_batches(sources, batch_size=4, workers=2, first_batch_size=2)
    assert [[index for index, _ in group] for group in batches] == [[0, 1], [2, 3, 4, 5]]  # sizes 2, 4, 1
    assert alone == [7]  # a one-candidate cut is built from its own source; python is not built


LEAN_KERNEL = """#include <torch/extension.h>

torch::Tensor forward(torch::Tensor x) { return x; }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward); }
"""
LIGHT_KERNEL = LEAN_KERNEL.replace("{ return x; }", "{ return at::relu(x); }")  # an operator the lean header lacks


def test_each_shared_build_holds_candidates_of_one_header_rung_in_order_from_the_earliest_left():
    kinds = "lean lean light lean lean lean light lean lean lean".split()
    sources = [((LIGHT_KERNEL if kind == "light" else LEAN_KERNEL) + f"// {index}\n", "cuda")
               for index, kind in enumerate(kinds)]  # fmt: skip
    batches, alone, _ = batching.plan_batches(sources, batch_size=4, workers=2, first_batch_size=1)
    groups = [[index for index, _ in group] for group in batches]
    assert groups == [[1, 3], [2, 6], [4, 5, 7, 8]]  # 2, then 4: the light pair took that build alone, then 4
    assert alone == [0, 9]  # the ramp's first, and the last one left
    for group in batches:  # what the shared build is built on: its members' one rung, not a heavier one
        names = [f"c{index}" for index, _ in group]
        source = shared_source.shared_source([wrapped for _, wrapped in group], names)
        rungs = {headers.lightest_rung(sources[index][0]) for index, _ in group}
        assert {headers.lightest_rung(source)} == rungs


@pytest.mark.parametrize(
    "snippet, fragment",
    [
        ("#define SCALE 2\n", "#define"),
        ('#pragma GCC optimize("O0")\n', "#pragma"),
        ('static std::string greeting = "hi";\n', "non-fundamental"),
        ("static int counter = start_counter();\n", "dynamic initialiser"),
        ("struct Noisy { Noisy() {} } noisy;\n", "global object"),
        ("__attribute__((constructor)) static void at_load() {}\n", "constructor"),
        ('extern "C" int exported() { return 1; }\n', "extern"),
        ('TORCH_LIBRARY(myops, m) { m.def("f"); }\n', "unrecognised"),
        ("namespace { std::vector<float> scratch_buffer; }\n", "non-fundamental"),
    ],
)
def test_wrap_refuses_code_that_could_affect_other_candidates(snippet, fragment):
    reason = shared_source.wrap_candidate(snippet + fixture("add_one.cpp"), "ka_c0")
    assert isinstance(reason, str) and fragment in reason


def test_wrap_accepts_harmless_top_level_code():
    harmless = (
        "// a comment with #define inside and PYBIND11_MODULE(TORCH_EXTENSION_NAME, x) { }\n"
        "static const int kOffset = 4;\nstruct Pair { int a; int b; };\n"
        "template <typename T> T twice(T x) { return x * 2; }\nint helper(int x);\n"
        "namespace detail { inline int id(int x) { return x; } }\n"
    )
    wrapped = shared_source.wrap_candidate(harmless + fixture("add_one.cpp"), "ka_c5")
    assert not isinstance(wrapped, str), wrapped
    assert wrapped.includes == ["#include <pybind11/pybind11.h>"]
    assert wrapped.body.startswith("namespace ka_c5 {") and "void ka_register(pybind11::module_& m)" in wrapped.body
    assert "PYBIND11_MODULE" not in shared_source.mask_source(wrapped.body)


def test_compiler_excerpt_keeps_the_first_error_lines():
    noise = "\n".join(f"note: included from header {i}" for i in range(2000))
    log = f"{noise}\nkernel.cpp:12:5: error: 'foo' was not declared in this scope\n{noise}"
    excerpt = compiler_excerpt(log, limit=2048)
    assert len(excerpt.encode()) <= 2048
    assert "kernel.cpp:12:5: error: 'foo' was not declared" in excerpt
    assert compiler_excerpt("short log") == "short log"


@real_build
def test_result_json_of_a_cached_build_is_readable(shared_pair, cache_dir):
    library = Path(shared_pair[0].library_path)
    data = json.loads((library.parent / "result.json").read_text())
    assert data["ok"] and data["library_path"] == str(library)


@real_build
def test_baton_left_by_a_killed_compile_does_not_block_the_rerun(tmp_path):
    # A build killed mid-compile (SIGKILL, timeout) leaves torch's "lock" baton in the build dir; the rerun
    # must compile instead of waiting on it until its own timeout.
    source = fixture("add_one.cpp") + "\n// baton probe\n"
    killed = build_extension(source, "cpp", "cpu", cache_dir=tmp_path, timeout_s=0.5)
    assert killed.timed_out
    (build_dir,) = [p for p in (tmp_path / "builds").iterdir() if p.is_dir()]
    (build_dir / "lock").write_text("")  # what torch's FileBaton leaves when its owner dies
    rerun = build_extension(source, "cpp", "cpu", cache_dir=tmp_path, timeout_s=240)
    assert rerun.ok, rerun.error
    assert not rerun.timed_out


def test_a_failed_batch_is_bisected_down_to_the_candidate_that_fails_alone():
    """No compiler: a fake build fails any source holding the bad candidate's marker."""
    good = "#include <torch/extension.h>\ntorch::Tensor forward(torch::Tensor x) {{ return x + {n}; }}\n"
    bind = 'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward); }\n'
    sources = [(good.format(n=n) + ("// BAD\n" if n == 5 else "") + bind, "cpp") for n in range(8)]
    builds: list[int] = []

    def fake_build(source: str, language: str) -> CompileResult:
        builds.append(source.count("forward(torch::Tensor x)"))  # candidates in this build
        ok = "// BAD" not in source
        return CompileResult(ok=ok, error=None if ok else "x.cpp: error: BAD", cache_key=str(len(builds)))

    with ThreadPoolExecutor(4) as executor:
        results = batching.compile_many(sources, fake_build, batch_size=8, executor=executor)
    assert [r.ok for r in results] == [True] * 5 + [False] + [True] * 2
    assert results[5].batch_size == 1 and "BAD" in results[5].error  # its error is its own
    assert sorted(builds, reverse=True) == [8, 4, 4, 2, 2, 1, 1]  # 8 fails; 4 ok + 4 fails; 2 ok + 2 fails; 1 + 1
    assert all(results[i].symbol_prefix == f"c{i}." for i in (0, 1, 2, 3, 6, 7))  # from shared builds
    assert results[4].symbol_prefix == "" and results[4].batch_size == 1  # its pair failed: built alone


def test_builds_start_in_the_candidates_order_the_first_alone_before_any_shared_build():
    """With the ramp starting at one, the first candidate is built alone: a worker takes it first, not after every
    shared build (the device waits for it)."""
    good = "#include <torch/extension.h>\ntorch::Tensor forward(torch::Tensor x) {{ return x + {n}; }}\n"
    bind = 'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward); }\n'
    sources = [(good.format(n=n) + bind, "cpp") for n in range(7)]
    started: list[int] = []

    def fake_build(source: str, language: str) -> CompileResult:
        started.append(source.count(f"{shared_source.SHARED_MODULE_VAR}.def_submodule(") or 1)  # kernels in the build
        return CompileResult(ok=True, cache_key=str(len(started)))

    with ThreadPoolExecutor(1) as executor:  # one worker: builds run in the order they were handed over
        results = batching.compile_many(sources, fake_build, batch_size=8, executor=executor, workers=2,
                                        first_batch_size=1)  # fmt: skip
    assert started == [1, 2, 4] and all(r.ok for r in results)
    assert results[0].symbol_prefix == "" and results[1].symbol_prefix == "c1."


@pytest.mark.parametrize("first_batch_size", [1, 3])
@pytest.mark.parametrize("urgent_builds", [0, 1, 3])
def test_a_stream_s_first_window_asks_for_its_first_builds_urgent_and_for_no_other(first_batch_size, urgent_builds):
    """The builds the device waits on (a first window's first `urgent_builds`, alone or shared) are urgent; the
    others, and a later window's, not."""
    bind = 'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward); }\n'
    sources = [(f"int forward(int x) {{ return x + {n}; }}\n" + bind, "cpp") for n in range(30)]
    calls: list[tuple[int, bool]] = []

    def fake_build(source: str, language: str, urgent: bool = False) -> CompileResult:
        calls.append((source.count(f"{shared_source.SHARED_MODULE_VAR}.def_submodule(") or 1, urgent))
        return CompileResult(ok=True, cache_key=str(len(calls)))

    with ThreadPoolExecutor(1) as executor:  # one worker: builds run in the order they were handed over
        batching.compile_many(sources, fake_build, batch_size=8, executor=executor, workers=2,
                              first_batch_size=first_batch_size, urgent_builds=urgent_builds)  # fmt: skip
    assert calls[0][0] == first_batch_size and len(calls) > urgent_builds
    assert [urgent for _, urgent in calls] == [True] * urgent_builds + [False] * (len(calls) - urgent_builds)


def test_a_failed_urgent_build_s_other_members_stay_urgent_and_its_culprit_does_not():
    """The ramp's second build (two kernels) fails on one member's error: the other is built again at once, still
    urgent (the device waits on it); the named member is rebuilt for its message only, at the lower priority. A
    failed build that was not urgent makes no urgent rebuild."""
    good = "#include <torch/extension.h>\ntorch::Tensor forward(torch::Tensor x) {{ return x + {n}; }}\n"
    bind = 'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward); }\n'
    sources = [(good.format(n=n) + ("// BAD\n" if n in (2, 5) else "") + bind, "cuda") for n in range(7)]
    builds: list[tuple[tuple[int, ...], bool, str]] = []

    def fake_build(source: str, language: str, urgent: bool = False, how: str = "alone") -> CompileResult:
        members = tuple(n for n in range(7) if f"x + {n};" in source)
        builds.append((members, urgent, how))
        lines = [n for n, line in enumerate(source.split("\n"), start=1) if line == "// BAD"]
        if not lines:
            return CompileResult(ok=True, cache_key=str(len(builds)))
        where = {"error_at": {"lines": lines, "namespaces": []}} if len(members) > 1 else {}
        return CompileResult(ok=False, error=f'/b/ka_x.cu({lines[0]}): error: "BAD"', cache_key="x", extra=where)

    with ThreadPoolExecutor(1) as executor:  # builds of 1, 2 (urgent), then 4 (not), in that order
        results = batching.compile_many(sources, fake_build, batch_size=4, executor=executor, workers=2,
                                        first_batch_size=1, urgent_builds=2,
                                        build_shared=partial(fake_build, how="shared"),
                                        build_culprit=partial(fake_build, how="culprit"))  # fmt: skip
    assert [r.ok for r in results] == [True, True, False, True, True, False, True]
    # the failed urgent build's other member next, still urgent; then the later build, not
    assert builds[:4] == [((0,), True, "alone"), ((1, 2), True, "shared"), ((1,), True, "alone"),
                          ((3, 4, 5, 6), False, "shared")]  # fmt: skip
    assert ((2,), False, "culprit") in builds and ((5,), False, "culprit") in builds
    assert ((3, 4, 6), False, "shared") in builds  # the failed later build's others: not urgent


def test_a_candidate_asked_to_be_built_alone_is_built_from_its_own_source_first_and_the_rest_shared():
    """The stream asks this for the control kernel (stages.py): a build keeps no record until the control's has
    come, so no other member's compile error may send it round again."""
    good = "#include <torch/extension.h>\ntorch::Tensor forward(torch::Tensor x) {{ return x + {n}; }}\n"
    bind = 'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward); }\n'
    sources = [(good.format(n=n) + ("// BAD\n" if n == 1 else "") + bind, "cpp") for n in range(5)]
    built: list[str] = []

    def fake_build(source: str, language: str) -> CompileResult:
        built.append(source)
        ok = "// BAD" not in source
        return CompileResult(ok=ok, error=None if ok else "x.cpp: error: BAD", cache_key=str(len(built)))

    batches, alone, reasons = batching.plan_batches(sources, batch_size=8, alone_asked=[0])
    assert [[index for index, _ in group] for group in batches] == [[1, 2, 3, 4]] and alone == [0] and reasons[0]
    with ThreadPoolExecutor(1) as executor:  # one worker: builds run in the order they were handed over
        results = batching.compile_many(sources, fake_build, batch_size=8, executor=executor, alone=[0])
    assert built[0] == sources[0][0] and built.count(sources[0][0]) == 1  # first, once, from its own source
    assert results[0].ok and results[0].batch_size == 1 and results[0].symbol_prefix == ""
    assert [r.ok for r in results] == [True, False, True, True, True]


def test_shared_sources_culprits_and_candidates_alone_each_go_to_their_build():
    """A shared build's failure is split (it does not try the source as written); a candidate its log names is built
    by `build_culprit`; one found by bisecting, like any candidate alone, by `build`."""
    good = "#include <torch/extension.h>\ntorch::Tensor forward(torch::Tensor x) {{ return x + {n}; }}\n"
    bind = 'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward); }\n'
    sources = [(good.format(n=n) + ("// BAD\n" if n in (2, 5) else "") + bind, "cpp") for n in range(6)]
    calls: list[tuple[str, str]] = []

    def fake_build(source: str, language: str, how: str = "alone") -> CompileResult:
        calls.append((source, how))
        if "// BAD" not in source:
            return CompileResult(ok=True, cache_key=str(len(calls)))
        # the first batch's log names the line of candidate 2's error; the second's names nobody
        line = source.split("\n").index("// BAD") + 1 if how == "shared" and "x + 2;" in source else 0
        return CompileResult(ok=False, error=f"x.cpp:{line}:1: error: BAD", cache_key=str(len(calls)),
                             extra={"error_at": {"lines": [line] if line else [], "namespaces": []}})  # fmt: skip

    results = batching.compile_many(sources, fake_build, batch_size=3, build_shared=partial(fake_build, how="shared"),
                                    build_culprit=partial(fake_build, how="culprit"))  # fmt: skip
    assert [r.ok for r in results] == [True, True, False, True, True, False]
    assert all((how == "shared") == (TORCH_EXTENSION_GLUE in source) for source, how in calls)
    assert (sources[2][0], "culprit") in calls and (sources[2][0], "alone") not in calls  # named by the log
    assert (sources[5][0], "alone") in calls and (sources[5][0], "culprit") not in calls  # found by bisecting


TORCH_EXTENSION_GLUE = f"PYBIND11_MODULE(TORCH_EXTENSION_NAME, {shared_source.SHARED_MODULE_VAR})"


def test_a_bisect_into_a_closed_pool_ends_instead_of_waiting_forever():
    good = "#include <torch/extension.h>\ntorch::Tensor forward(torch::Tensor x) {{ return x + {n}; }}\n"
    bind = 'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward); }\n'
    sources = [(good.format(n=n) + bind, "cpp") for n in range(4)]
    assert len(batching.plan_batches(sources, 4)[0]) == 1  # one shared build, to be bisected
    executor = ThreadPoolExecutor(2)

    def failing_then_closing(source: str, language: str) -> CompileResult:
        executor.shutdown(wait=False)  # the build is being stopped while this batch fails
        return CompileResult(ok=False, error="x.cpp: error: BAD")

    with pytest.raises(RuntimeError):
        batching.compile_many(sources, failing_then_closing, batch_size=4, executor=executor)


def test_a_failed_batch_whose_log_names_the_candidate_builds_it_alone_and_the_rest_together():
    """No compiler: a fake build fails a source holding the bad candidate, pointing at its line as nvcc does."""
    good = "#include <torch/extension.h>\ntorch::Tensor forward(torch::Tensor x) {{ return x + {n}; }}\n"
    bind = 'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward); }\n'
    sources = [(good.format(n=n) + ("// BAD\n" if n in (2, 5) else "") + bind, "cu") for n in range(8)]
    sources = [(source, "cuda") for source, _ in sources]
    builds: list[int] = []

    def fake_build(source: str, language: str) -> CompileResult:
        builds.append(source.count("forward(torch::Tensor x)"))
        lines = [n for n, line in enumerate(source.split("\n"), start=1) if line == "// BAD"]
        if not lines:
            return CompileResult(ok=True, cache_key=str(len(builds)))
        log = "\n".join(f'/b/ka_x.cu({n}): error: identifier "BAD" is undefined' for n in lines)
        where = {"error_at": {"lines": lines, "namespaces": []}} if builds[-1] > 1 else {}
        return CompileResult(ok=False, error=log, cache_key=str(len(builds)), extra=where)

    with ThreadPoolExecutor(4) as executor:
        results = batching.compile_many(sources, fake_build, batch_size=8, executor=executor)
    assert [r.ok for r in results] == [True, True, False, True, True, False, True, True]
    assert sorted(builds, reverse=True) == [8, 6, 1, 1]  # both named at once: alone; the six others together
    assert all(results[i].batch_size == 6 and results[i].symbol_prefix == f"c{i}." for i in (0, 1, 3, 4, 6, 7))


def test_a_failed_build_is_rebuilt_before_later_builds_and_its_culprit_last():
    """One worker, two builds of four; the first fails naming one member. Its other three go next (the device waits
    for them: they come first among the candidates), then the later build, then the culprit, built alone only for
    its own message."""
    good = "#include <torch/extension.h>\ntorch::Tensor forward(torch::Tensor x) {{ return x + {n}; }}\n"
    bind = 'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward); }\n'
    sources = [(good.format(n=n) + ("// BAD\n" if n == 1 else "") + bind, "cuda") for n in range(8)]
    builds: list[tuple[int, bool]] = []

    def fake_build(source: str, language: str) -> CompileResult:
        lines = [n for n, line in enumerate(source.split("\n"), start=1) if line == "// BAD"]
        members = source.count("forward(torch::Tensor x)")
        builds.append((members, bool(lines)))
        if not lines:
            return CompileResult(ok=True, cache_key=str(len(builds)))
        where = {"error_at": {"lines": lines, "namespaces": []}} if members > 1 else {}
        return CompileResult(ok=False, error=f'/b/ka_x.cu({lines[0]}): error: "BAD"', cache_key="x", extra=where)

    with ThreadPoolExecutor(1) as executor:
        results = batching.compile_many(sources, fake_build, batch_size=4, executor=executor)
    assert builds == [(4, True), (3, False), (4, False), (1, True)]
    assert [r.ok for r in results] == [True, False] + [True] * 6
    assert results[1].batch_size == 1 and "BAD" in results[1].error


def test_error_locations_read_nvcc_gcc_and_mangled_names():
    from builder.verify.compile.extension import error_locations

    log = "\n".join([
        '/cache/b/ka_1.cu(41): error: identifier "x" is undefined',
        "/cache/b/ka_1.cu(77): warning #177-D: variable declared but never referenced",
        '          detected during instantiation of "void ka_c4::k<T>(T *) [with T=float]" at line 90 of /cache/b/ka_1.cu',
        "/cache/b/ka_1.cpp:12:5: error: 'y' was not declared in this scope",
        "/usr/include/torch/csrc/api.h:3:1: error: in a header",
        "ImportError: /cache/b/ka_1.so: undefined symbol: _ZN6ka_c116helperEv",
    ])  # fmt: skip
    assert error_locations(log, "ka_1.cu") == {"lines": [41, 90], "namespaces": ["ka_c11", "ka_c4"]}
    assert error_locations(log, "ka_1.cpp")["lines"] == [12]


def test_blame_bisects_when_an_error_lies_outside_every_candidate():
    source = "#include <x>\nnamespace ka_c0 {\nint a;\n}  // namespace ka_c0\nnamespace ka_c1 {\nint b;\n}  // namespace ka_c1\n"
    located = CompileResult(ok=False, extra={"error_at": {"lines": [6], "namespaces": []}})
    assert shared_source.blame(located, source) == {1}
    include_error = CompileResult(ok=False, extra={"error_at": {"lines": [1, 6], "namespaces": []}})
    assert shared_source.blame(include_error, source) == set()  # an include line: who brought it is not known
    assert shared_source.blame(CompileResult(ok=False), source) == set()


@real_build
def test_a_real_compiler_log_blames_the_broken_member_of_its_shared_build(build, mixed_batch):
    sources = [(fixture("add_three.cpp"), "cpp"), (fixture("uses_define.cpp"), "cpp"), (fixture("broken.cpp"), "cpp")]
    (group,), _, _ = batching.plan_batches(sources)
    source = shared_source.shared_source([w for _, w in group], [f"c{i}" for i, _ in group])
    failed = build(source, "cpp")  # the mixed batch's failed shared build, from the cache
    assert failed.cached and not failed.ok
    assert shared_source.blame(failed, source) == {2}
