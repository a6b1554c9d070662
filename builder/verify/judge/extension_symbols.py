"""Library entry points a built extension imports (trusted parent side: reads the .so, loads none of it).

A candidate's process is the candidate's: its profiler census can be switched off or fed, and a call that skips
the dispatcher (`at::cpu::mm`, `at::_ops::mm::redispatch`, cuBLAS) never reaches the profiler at all. What the
dynamic linker must resolve by name is fixed once the extension is built, and the parent reads it here: the
undefined dynamic symbols (`nm -D --undefined-only`, binutils, present wherever the linker that built the
extension is). Itanium names are matched by their nested-name components, decoded here (`components`), so a
template argument or an odd signature never confuses a match; `c++filt` only writes the note.

Counted: ATen operators past the dispatcher (a backend's namespace, `at::native`, `at::_ops::<op>::redispatch`),
heavy operators through it (`at::_ops::mm::call`), BLAS/DNN/FFT/sparse libraries by C name, cuBLAS through ATen,
CUTLASS's library, TorchScript, dispatcher look-ups by name, and names resolved at run time (`dlsym` and its
kin): no honest extension of the bundled corpus imports one. Not counted: allocation and views, tensor accessors,
c10 errors, pybind11 and the Python C API (its submodules import PyImport_AddModule in every shared build), the
CUDA runtime.

A shared build (several candidates in one .so, `batching.py`) imports for all its members. An import is charged
to a member whose source names it (`mm` for `at::cpu::mm`, `cublasSgemm` for `cublasSgemm_v2`); one that no member
names came from a header's inline code, and is charged to the members whose source shows library calls, or to all
when none does.

Out of reach: code that finds a library's entry points without naming them (offsets from a named glue symbol, the
loader's tables walked from memory) and torch reached through the Python interpreter by the C API every extension
imports. The census sees their dispatcher calls, as the child's claim.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from builder import config
from builder.verify.judge import aten_names, source_text

log = logging.getLogger(__name__)

_FORTRAN = re.compile(config.LIBRARY_FORTRAN_NAME)
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_SUFFIX_BY_LANGUAGE = {"cuda": ".cu", "cpp": ".cpp"}


@dataclass(frozen=True)
class LibraryImport:
    symbol: str  # as the extension imports it (mangled)
    spelled: str  # the name a source writes to reach it (`mm` for at::cpu::mm, `cublasSgemm` for cublasSgemm_v2)
    runtime: bool = False  # a run-time look-up: what it reaches, no import shows


def components(symbol: str) -> tuple[str, ...]:
    """The leading name components of an Itanium-mangled function or object: `_ZN2at3cpu2mmERKNS_6TensorES3_` ->
    ('at', 'cpu', 'mm'); () for special names (vtables, typeinfo, guards) and C names."""
    if not symbol.startswith("_Z") or symbol.startswith(("_ZT", "_ZGV", "_ZTh", "_ZTv")):
        return ()
    index, nested = 2, symbol.startswith("_ZN")
    parts: list[str] = []
    if nested:
        index = 3
        while index < len(symbol) and symbol[index] in "rVKRO":  # cv- and ref-qualifiers of a member function
            index += 1
    if symbol.startswith("St", index):
        parts.append("std")
        index += 2
    while index < len(symbol) and symbol[index].isdigit():
        end = index
        while end < len(symbol) and symbol[end].isdigit():
            end += 1
        length = int(symbol[index:end])
        name = symbol[end : end + length]
        if len(name) != length:
            return ()
        parts.append(name)
        index = end + length
        while symbol.startswith("B", index):  # an ABI tag (`B5cxx11`) belongs to the name before it
            index += 1
            while index < len(symbol) and symbol[index].isdigit():
                index += 1
        if not nested:
            break
    return tuple(parts)


def classify(symbol: str) -> LibraryImport | None:
    """The library entry point `symbol` (one undefined dynamic symbol, version suffix removed) is, or None."""
    if not symbol.startswith("_Z"):
        if symbol in config.RUNTIME_LOOKUPS or symbol.startswith(config.RUNTIME_LOOKUP_PREFIXES):
            return LibraryImport(symbol, symbol, runtime=True)
        if symbol.startswith(config.LIBRARY_C_PREFIXES) or _FORTRAN.fullmatch(symbol):
            return LibraryImport(symbol, symbol)
        return None
    parts = components(symbol)
    if len(parts) >= 4 and parts[:2] == ("at", "_ops"):
        op, entry = parts[2], parts[3]
        wanted = aten_names.is_heavy(op) if entry == "call" else not aten_names.is_glue(op)
        return LibraryImport(symbol, op) if wanted else None
    if len(parts) >= 3 and parts[0] == "at" and parts[1] in config.ATEN_BACKEND_NAMESPACES:
        name = parts[2]
        if name in config.LIBRARY_HANDLE_GETTERS:
            return LibraryImport(symbol, name)
        if parts[1] == "native" or aten_names.is_op(name):
            return None if aten_names.is_glue(name) else LibraryImport(symbol, name)
    for namespace in config.LIBRARY_CXX_NAMESPACES:
        if parts[: len(namespace)] == namespace and len(parts) > len(namespace):
            return LibraryImport(symbol, parts[-1])
    if len(parts) >= 3 and parts[:2] == ("c10", "Dispatcher") and parts[2] in config.DISPATCHER_LOOKUPS:
        return LibraryImport(symbol, parts[2])
    if len(parts) >= 4 and parts[:2] == ("torch", "nn") and parts[-1] == "forward":  # torch::nn::LinearImpl
        return LibraryImport(symbol, parts[-2].removesuffix("Impl"))
    return None


def _nm() -> str | None:
    return shutil.which("nm")


@lru_cache(maxsize=1)
def _warn_no_nm() -> None:
    log.warning("nm (binutils) not found: the imports of built extensions are not read for library use")


@lru_cache(maxsize=256)
def _read_undefined(path: str, mtime_ns: int, size: int) -> tuple[str, ...] | None:
    nm = _nm()
    if nm is None:
        _warn_no_nm()  # once a process: the source scan and the census still stand
        return None
    try:
        done = subprocess.run([nm, "-D", "--undefined-only", "-P", path], capture_output=True, text=True,
                              timeout=config.NM_TIMEOUT_S, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("nm could not read %s: %s", path, exc)
        return None
    if done.returncode != 0:
        log.warning("nm could not read %s: %s", path, done.stderr.strip()[-300:])
        return None
    return tuple(line.split()[0].split("@")[0] for line in done.stdout.splitlines() if line.split())


def undefined_symbols(path: str | Path) -> tuple[str, ...] | None:
    """The undefined dynamic symbols of a shared library, mangled, without version suffixes; None when they
    cannot be read (no nm, an unreadable file)."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return _read_undefined(str(path), stat.st_mtime_ns, stat.st_size)


def library_imports(symbols: tuple[str, ...]) -> list[LibraryImport]:
    return [found for found in map(classify, dict.fromkeys(symbols)) if found is not None]


def readable(imports: list[LibraryImport]) -> list[str]:
    """The imports as a reader would write them (`at::cpu::mm(at::Tensor const&, at::Tensor const&)`)."""
    names = [item.symbol for item in imports]
    tool = shutil.which("c++filt")
    if tool and names:
        try:
            done = subprocess.run([tool, *names], capture_output=True, text=True, timeout=config.NM_TIMEOUT_S)
            lines = done.stdout.splitlines()
            if done.returncode == 0 and len(lines) == len(names):
                return lines
        except (OSError, subprocess.TimeoutExpired):
            pass
    return ["::".join(components(name)) or name for name in names]


def _spelled(item: LibraryImport, identifiers: set[str]) -> bool:
    name = item.spelled
    return any(name == word or name.startswith(f"{word}_") for word in identifiers if len(word) > 1)


def _identifiers(source: str) -> set[str]:
    return set(_IDENTIFIER.findall(source_text.code_of(source)))


def _shared_source(compiled: Any, language: str) -> str | None:
    path = Path(compiled.library_path).parent / f"{compiled.module_name}{_SUFFIX_BY_LANGUAGE.get(language, '')}"
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def _charged(imports: list[LibraryImport], compiled: Any, source: str, language: str) -> list[LibraryImport]:
    """The imports of a shared build that are this member's (module docstring)."""
    shared = _shared_source(compiled, language)
    if shared is None:
        return imports  # no way to tell the members apart: every one carries the build's imports
    own, everyone = _identifiers(source), _identifiers(shared)
    own_calls = bool(source_text.library_calls(source_text.code_of(source)))
    others_calls = bool(source_text.library_calls(source_text.code_of(shared)))
    charged = []
    for item in imports:
        if _spelled(item, own):
            charged.append(item)
        elif not _spelled(item, everyone) and (own_calls or not others_calls):
            charged.append(item)
    return charged


def _listed(names: list[str]) -> str:
    shown = names[: config.EXTENSION_IMPORTS_SHOWN]
    more = len(names) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more else "")


def symbol_notes(compiled: Any, source: str, language: str) -> dict[str, str]:
    """{"uses_torch_ops": what the extension imports} for a built candidate; {} when it imports no library entry
    point, has no extension (Python), or its imports cannot be read."""
    if not getattr(compiled, "ok", False) or not getattr(compiled, "library_path", None):
        return {}
    symbols = undefined_symbols(compiled.library_path)
    if symbols is None:
        return {}
    imports = library_imports(symbols)
    shared = bool(getattr(compiled, "symbol_prefix", ""))
    if imports and shared:
        imports = _charged(imports, compiled, source, language)
    if not imports:
        return {}
    who = "its shared build imports" if shared else "extension imports"
    lookups = [item for item in imports if item.runtime]
    entries = [item for item in imports if not item.runtime]
    parts = []
    if entries:
        parts.append(f"{who} {_listed(readable(entries))}")
    if lookups:
        names = _listed([item.symbol for item in lookups])
        parts.append(f"{who} {names}: names resolved at run time, library calls cannot be ruled out")
    return {"uses_torch_ops": "; ".join(parts)}
