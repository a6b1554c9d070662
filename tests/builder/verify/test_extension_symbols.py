"""extension_symbols: library entry points read from a built extension's imports in the parent, glue never
counted, a shared build's imports charged to the member that names them; and on real CPU builds, the honest
fixtures import nothing that counts while the attack fixtures are seen whatever their source hides."""

from __future__ import annotations

import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from builder.verify.compile.extension import CompileResult, build_extension
from builder.verify.judge import extension_symbols, static_scan

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures" / "candidates"
MANIFEST = json.loads((FIXTURES / "fixtures.json").read_text())["fixtures"]

# Imports every honest extension has (seen in the honest CPU fixtures' builds): allocation, accessors, c10 errors,
# pybind11 and the Python C API, the C++ runtime, the CUDA runtime and c10's CUDA stream.
GLUE = [
    "_ZN2at4_ops10empty_like4callERKNS_6TensorESt8optionalIN3c1010ScalarTypeEES5_INS6_6LayoutEES5_INS6_6DeviceEES5_IbES5_INS6_12MemoryFormatEE",
    "_ZN2at4_ops19empty_memory_format4callEN3c108ArrayRefINS2_6SymIntEEESt8optionalINS2_10ScalarTypeEES6_INS2_6LayoutEES6_INS2_6DeviceEES6_IbES6_INS2_12MemoryFormatEE",
    "_ZNK2at10TensorBase8data_ptrIfEEPT_v",
    "_ZNK2at10TensorBase21__dispatch_contiguousEN3c1012MemoryFormatE",
    "_ZN3c106detail14torchCheckFailEPKcS2_jS2_",
    "_ZN8pybind116detail11type_casterIN2at6TensorEvE4loadENS_6handleEb",
    "PyObject_GetAttrString",
    "PyEval_GetBuiltins",
    "_ZNSt7__cxx1119basic_ostringstreamIcSt11char_traitsIcESaIcEEC1Ev",
    "cudaLaunchKernel",
    "_ZN3c104cuda20getCurrentCUDAStreamEa",
    "_ZN2at4cuda26getCurrentDevicePropertiesEv",
    "_ZN2at3cpu17is_avx2_supportedEv",
    "_ZN2at4_ops4tanh4callERKNS_6TensorE",  # through the dispatcher: the profiler and the source scan see it
    "_ZN2at4cuda5emptyEN3c108ArrayRefIlEENS1_13TensorOptionsESt8optionalINS1_12MemoryFormatEE",
    "_ZTVN5torch8autograd12AutogradMetaE",
]
LIBRARY = {
    "_ZN2at3cpu2mmERKNS_6TensorES3_": "mm",
    "_ZN2at4cuda2mmERKNS_6TensorES3_": "mm",
    "_ZN2at4cuda4tanhERKNS_6TensorE": "tanh",
    "_ZN2at4_ops2mm4callERKNS_6TensorES4_": "mm",
    "_ZN2at4_ops11softmax_int4callERKNS_6TensorElSt8optionalIN3c1010ScalarTypeEE": "softmax_int",
    "_ZN2at4_ops4tanh10redispatchEN3c1014DispatchKeySetERKNS_6TensorE": "tanh",
    "_ZN2at6native9tanh_stubE": "tanh_stub",
    "_ZN2at25compositeexplicitautograd6linearERKNS_6TensorES3_RKSt8optionalIS1_E": "linear",
    "_ZN2at4cuda4blas4gemmIfEEvcclllN3c1017ScalarTypeToCPPTypeIXT_EE4typeEPKS4_lS8_lS4_PS4_l": "gemm",
    "_ZN2at4cuda24getCurrentCUDABlasHandleEv": "getCurrentCUDABlasHandle",
    "_ZN3c1010Dispatcher17findSchemaOrThrowEPKcS2_": "findSchemaOrThrow",
    "_ZN5torch3jit4loadERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE": "load",
    "cublasSgemm_v2": "cublasSgemm_v2",
    "cublasLtMatmul": "cublasLtMatmul",
    "cudnnConvolutionForward": "cudnnConvolutionForward",
    "cufftExecC2C": "cufftExecC2C",
    "cblas_sgemm": "cblas_sgemm",
    "sgemm_": "sgemm_",
}
RUNTIME = ["dlsym", "dlopen", "dl_iterate_phdr"]


def test_itanium_names_decode_to_their_components():
    assert extension_symbols.components("_ZN2at3cpu2mmERKNS_6TensorES3_") == ("at", "cpu", "mm")
    assert extension_symbols.components("_ZNK2at10TensorBase8data_ptrIfEEPT_v") == ("at", "TensorBase", "data_ptr")
    assert extension_symbols.components("_ZN3c1010Dispatcher17findSchemaOrThrowEPKcS2_")[2] == "findSchemaOrThrow"
    assert extension_symbols.components("_ZNSt7__cxx1119basic_ostringstreamIcEC1Ev")[:2] == ("std", "__cxx11")
    assert extension_symbols.components("_ZTVN2at6native3FooE") == ()  # a vtable, not a call
    assert extension_symbols.components("_ZN2at3cpu99mm") == ()  # a length past the end: not a name
    assert extension_symbols.components("cublasSgemm_v2") == ()


@pytest.mark.parametrize("symbol", GLUE)
def test_glue_every_honest_extension_imports_does_not_count(symbol):
    assert extension_symbols.classify(symbol) is None


@pytest.mark.parametrize(("symbol", "spelled"), sorted(LIBRARY.items()))
def test_library_entry_points_count(symbol, spelled):
    found = extension_symbols.classify(symbol)
    assert found is not None and found.spelled == spelled and not found.runtime


@pytest.mark.parametrize("symbol", RUNTIME)
def test_names_resolved_at_run_time_count(symbol):
    found = extension_symbols.classify(symbol)
    assert found is not None and found.runtime


def fake_build(tmp_path: Path, symbols: list[str], monkeypatch, shared_source: str | None = None) -> CompileResult:
    tmp_path.mkdir(parents=True, exist_ok=True)
    library = tmp_path / "ka_build.so"
    library.write_bytes(b"\x7fELF")
    if shared_source is not None:
        (tmp_path / "ka_build.cpp").write_text(shared_source)
    monkeypatch.setattr(extension_symbols, "undefined_symbols", lambda path: tuple(symbols))
    prefix = "c1." if shared_source is not None else ""
    return CompileResult(ok=True, library_path=str(library), module_name="ka_build", symbol_prefix=prefix)


def test_a_note_names_the_imports_readably(tmp_path, monkeypatch):
    compiled = fake_build(tmp_path, [*GLUE, "_ZN2at3cpu2mmERKNS_6TensorES3_", "dlsym"], monkeypatch)
    note = extension_symbols.symbol_notes(compiled, "// no text names it", "cpp")["uses_torch_ops"]
    assert "extension imports at::cpu::mm(at::Tensor const&, at::Tensor const&)" in note
    assert "dlsym: names resolved at run time" in note


def test_an_extension_of_glue_alone_has_no_note(tmp_path, monkeypatch):
    assert extension_symbols.symbol_notes(fake_build(tmp_path, GLUE, monkeypatch), "", "cpp") == {}
    assert extension_symbols.symbol_notes(CompileResult(ok=True), "", "python") == {}  # no extension at all
    assert extension_symbols.symbol_notes(CompileResult(ok=False, error="x"), "", "cpp") == {}


HONEST = "namespace ka_c0 {\ntorch::Tensor forward(torch::Tensor x) { for (;;) {} }\n}\n"
MATMUL = "namespace ka_c1 {\ntorch::Tensor forward(torch::Tensor a, torch::Tensor b) { return at::matmul(a, b); }\n}\n"
PASTED = "namespace ka_c2 {\ntorch::Tensor forward(torch::Tensor a) { return at::JOIN(c, pu)::mm(a, a); }\n}\n"
MATMUL_IMPORT = "_ZN2at4_ops6matmul4callERKNS_6TensorES4_"
CPU_MM = "_ZN2at3cpu2mmERKNS_6TensorES3_"
CONVOLUTION = "_ZN2at4_ops11convolution4callERKNS_6TensorE"  # from a header's inline code: nobody names it


def test_a_shared_build_charges_an_import_to_the_member_that_names_it(tmp_path, monkeypatch):
    compiled = fake_build(tmp_path, [*GLUE, MATMUL_IMPORT, CPU_MM], monkeypatch, HONEST + MATMUL + PASTED)
    assert extension_symbols.symbol_notes(compiled, HONEST, "cpp") == {}
    assert "at::_ops::matmul::call" in extension_symbols.symbol_notes(compiled, MATMUL, "cpp")["uses_torch_ops"]
    pasted = extension_symbols.symbol_notes(compiled, PASTED, "cpp")["uses_torch_ops"]
    assert "shared build imports at::cpu::mm(" in pasted and "matmul" not in pasted


def test_an_import_no_member_names_goes_to_the_members_that_call_a_library_or_to_all(tmp_path, monkeypatch):
    compiled = fake_build(tmp_path, [*GLUE, CONVOLUTION], monkeypatch, HONEST + MATMUL)
    assert extension_symbols.symbol_notes(compiled, HONEST, "cpp") == {}  # the matmul member explains it
    assert "uses_torch_ops" in extension_symbols.symbol_notes(compiled, MATMUL, "cpp")
    alone = fake_build(tmp_path / "x", [*GLUE, CONVOLUTION], monkeypatch, HONEST + HONEST.replace("c0", "c3"))
    assert "uses_torch_ops" in extension_symbols.symbol_notes(alone, HONEST, "cpp")  # nobody explains it: all carry it


def test_without_nm_the_imports_are_not_read_and_it_says_so(tmp_path, monkeypatch, caplog):
    library = tmp_path / "x.so"
    library.write_bytes(b"\x7fELF")
    monkeypatch.setattr(extension_symbols, "_nm", lambda: None)
    extension_symbols._read_undefined.cache_clear()
    extension_symbols._warn_no_nm.cache_clear()
    with caplog.at_level(logging.WARNING, logger="builder.verify.judge.extension_symbols"):
        assert extension_symbols.undefined_symbols(library) is None
    assert "nm (binutils) not found" in caplog.text


# --- real CPU builds ---------------------------------------------------------------------------------------------

# The bundled candidates' builds are read the same way in the real CPU build of the pipeline tests (test_e2e_cpu).
HONEST_CPU = ["cpu/correct_scale_shift.cpp", "cpu/incorrect_input_zeroing.cpp"]
BUNDLED_CPU: list[str] = []
ATTACKS = {
    "cpu/torch_ops_cpu_namespace_pasted.cpp": "at::cpu::mm(",
    "cpu/torch_ops_ops_redispatch.cpp": "at::_ops::mm::redispatch(",
}


@pytest.fixture(scope="module")
def builds(shared_cache_dir):
    # The session's shared compile cache: test_adversarial's CLI runs built these fixtures alone, as here.
    cache = shared_cache_dir / "compile"
    paths = [FIXTURES / name for name in [*HONEST_CPU, *ATTACKS]] + [REPO / name for name in BUNDLED_CPU]
    with ThreadPoolExecutor(max(1, min(len(paths), os.cpu_count() or 1))) as pool:  # one build a core
        built = pool.map(lambda path: build_extension(path.read_text(), "cpp", "cpu", cache_dir=cache), paths)
        return dict(zip(paths, built, strict=True))


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("name", HONEST_CPU + BUNDLED_CPU)
def test_honest_cpu_builds_get_no_new_flag(name, builds):
    path = FIXTURES / name if (FIXTURES / name).exists() else REPO / name
    compiled = builds[path]
    assert compiled.ok, compiled.error
    assert extension_symbols.undefined_symbols(compiled.library_path), "nm read no imports"
    assert extension_symbols.symbol_notes(compiled, path.read_text(), "cpp") == {}
    if name in MANIFEST:
        assert static_scan.scan(path.read_text(), "cpp") <= set(MANIFEST[name]["flags"])


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attack_builds_are_seen_by_their_imports(name, builds):
    path = FIXTURES / name
    compiled = builds[path]
    assert compiled.ok, compiled.error
    note = extension_symbols.symbol_notes(compiled, path.read_text(), "cpp")["uses_torch_ops"]
    assert f"extension imports {ATTACKS[name]}" in note


# --- real CUDA builds (a GPU box) --------------------------------------------------------------------------------

HONEST_CUDA = ["cuda/correct_scale_shift.cu", "cuda/correct_fused_fast.cu", "cuda/incorrect_side_stream.cu"]
ATTACKS_CUDA = {"cuda/torch_ops_cuda_namespace_pasted.cu": "at::cuda::mm("}


@pytest.fixture(scope="module")
def cuda_builds(shared_cache_dir):
    cache = shared_cache_dir / "compile"
    names = [*HONEST_CUDA, *ATTACKS_CUDA]
    return {name: build_extension((FIXTURES / name).read_text(), "cuda", "cuda", cache_dir=cache) for name in names}


@pytest.mark.gpu
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("name", HONEST_CUDA)
def test_honest_cuda_builds_import_nothing_that_counts(name, cuda_builds):
    """The CUDA runtime, c10's streams and ATen's device helpers are glue: an honest CUDA extension, linked as torch
    links it, imports no library entry point and no run-time look-up."""
    compiled = cuda_builds[name]
    assert compiled.ok, compiled.error
    symbols = extension_symbols.undefined_symbols(compiled.library_path)
    assert symbols, "nm read no imports"
    assert extension_symbols.library_imports(symbols) == []


@pytest.mark.gpu
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("name", sorted(ATTACKS_CUDA))
def test_cuda_attack_builds_are_seen_by_their_imports(name, cuda_builds):
    compiled = cuda_builds[name]
    assert compiled.ok, compiled.error
    note = extension_symbols.symbol_notes(compiled, (FIXTURES / name).read_text(), "cuda")["uses_torch_ops"]
    assert f"extension imports {ATTACKS_CUDA[name]}" in note
