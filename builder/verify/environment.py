"""The machine a record was verified on: GPU, driver, CUDA, torch, nvcc and builder versions.

Read with `nvidia-smi` and `nvcc --version` rather than by initialising CUDA in the builder process
(the parent stays free of a CUDA context; children own the GPU).
"""

from __future__ import annotations

import functools
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from builder import config

SMI_TIMEOUT_S = 20.0
# What the builder's process had read of the machine, given to an engine process (`adopt`): an engine's first clean
# reference is keyed by the GPU and the versions, and would otherwise wait for torch's import, git, nvidia-smi and
# nvcc in the engine.
_GIVEN: dict[str, Any] = {}


def _run(argv: list[str]) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=SMI_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def visible_gpu_ids() -> list[str]:
    """The GPUs this process may use, as nvidia-smi ids, in CUDA's order: $CUDA_VISIBLE_DEVICES when set (indices
    or UUIDs; an empty value hides them all), else every GPU nvidia-smi lists. nvidia-smi itself ignores the
    variable, so counting its list alone would put a worker on a GPU that `--gpus 1` meant to leave out."""
    present = _gpus_present()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return [str(i) for i in range(present)]
    ids = []
    for part in (p.strip() for p in visible.split(",")):
        if not part or (part.isdigit() and int(part) >= present) or (not part.isdigit() and not present):
            break  # CUDA stops at the first id it cannot use
        ids.append(part)
    return ids


def gpu_count() -> int:
    return len(visible_gpu_ids())


@functools.lru_cache(maxsize=1)
def _gpus_present() -> int:
    if "gpus_present" in _GIVEN:
        return int(_GIVEN["gpus_present"])
    listed = _run(["nvidia-smi", "-L"]) if shutil.which("nvidia-smi") else None
    return len([line for line in (listed or "").splitlines() if line.startswith("GPU ")])


def gpu_info(index: int = 0) -> dict[str, str] | None:
    """{"name", "compute_capability", "driver_version"} (and "memory_mib" where nvidia-smi gave it) of visible GPU
    `index` (CUDA's numbering), or None."""
    ids = visible_gpu_ids()
    return _smi_gpu_info(ids[index]) if index < len(ids) else None


@functools.lru_cache(maxsize=8)
def _smi_gpu_info(smi_id: str) -> dict[str, str] | None:
    if smi_id in _GIVEN.get("gpu_info", {}):
        return _GIVEN["gpu_info"][smi_id]
    if shutil.which("nvidia-smi") is None:
        return None
    out = _run(["nvidia-smi", f"--id={smi_id}", "--query-gpu=name,compute_cap,driver_version,memory.total",
                "--format=csv,noheader,nounits"])  # fmt: skip
    if not out or "," not in out:
        return None
    parts = [part.strip() for part in out.strip().splitlines()[0].split(",")]
    info = {"name": parts[0], "compute_capability": parts[1], "driver_version": parts[2]}
    if len(parts) > 3 and parts[3].isdigit():  # MiB
        info["memory_mib"] = parts[3]
    return info


def gpu_memory_gib(index: int = 0) -> float | None:
    """Visible GPU `index`'s memory in GiB as nvidia-smi reports it, or None where it is not known."""
    info = gpu_info(index)
    return int(info["memory_mib"]) / 1024 if info and info.get("memory_mib") else None


def gpu_arch(index: int = 0) -> str | None:
    """Compute capability like "9.0" (the only arch we build for), or None without a GPU."""
    info = gpu_info(index)
    return info["compute_capability"] if info else None


@functools.lru_cache(maxsize=1)
def cuda_home() -> str | None:
    """The CUDA toolkit root: $CUDA_HOME / $CUDA_PATH, else nvcc's grandparent, else /usr/local/cuda."""
    for name in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(name):
            return os.environ[name]
    nvcc = shutil.which("nvcc")
    roots = ([Path(nvcc).resolve().parent.parent] if nvcc else []) + [Path("/usr/local/cuda")]
    for root in roots:  # a root has the runtime headers (a wrapper nvcc in /usr/local/bin does not make one)
        if (root / "include" / "cuda_runtime.h").exists() and (root / "bin" / "nvcc").exists():
            return str(root)
    return None


@functools.lru_cache(maxsize=1)
def nvcc_version() -> str | None:
    if "nvcc_version" in _GIVEN:
        return _GIVEN["nvcc_version"]
    home = cuda_home()
    nvcc = shutil.which("nvcc") or (str(Path(home) / "bin" / "nvcc") if home else None)
    out = _run([nvcc, "--version"]) if nvcc else None
    match = re.search(r"release ([\d.]+)", out or "")
    return match.group(1) if match else None


@functools.lru_cache(maxsize=4)
def toolchain(backend: str) -> dict[str, str | None]:
    """What turns a source into a module besides torch: the interpreter (resolved: every venv of one Python is the
    same one), the host compiler a build uses (`$CXX`, else c++) by its resolved path and version line, and nvcc's
    version on the CUDA backend. Part of a build's cache key, so no result outlives the tools that made it."""
    cxx = shutil.which(os.environ.get("CXX") or "c++")
    version = (_run([cxx, "--version"]) or "").strip().splitlines() if cxx else []
    return {"python": sys.version, "interpreter": os.path.realpath(sys.executable),
            "cxx": os.path.realpath(cxx) if cxx else None, "cxx_version": version[0] if version else None,
            "nvcc": nvcc_version() if backend == "cuda" else None}  # fmt: skip


@functools.lru_cache(maxsize=1)
def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.lru_cache(maxsize=1)
def torch_versions() -> tuple[str, str | None]:
    if "torch_versions" in _GIVEN:
        return tuple(_GIVEN["torch_versions"])
    import torch

    return torch.__version__, torch.version.cuda


@functools.lru_cache(maxsize=1)
def builder_version() -> str:
    """The builder's version and the commit of its code, as a PEP 440 local label (`0.1.0+g1a2b3c4d5e6f`,
    `.dirty` when tracked files had uncommitted changes), so a record names the code that verified it.

    The commit comes from KA_BUILDER_COMMIT when set (a copy of the tree without .git, as on a GPU box the tree was copied to:
    `benchmarks/device/build_sample.sh` says how), else from git; the bare version when neither is known."""
    from builder import __version__

    if "builder_version" in _GIVEN:
        return _GIVEN["builder_version"]
    commit = _commit_from_env() or _commit_from_git(config.REPO_ROOT)
    return f"{__version__}+{commit}" if commit else __version__


def _commit_from_env() -> str | None:
    value = os.environ.get(config.BUILDER_COMMIT_ENV, "").strip().lower()
    match = re.fullmatch(r"g?([0-9a-f]{7,40})(\.dirty)?", value)
    return f"g{match.group(1)[:12]}{match.group(2) or ''}" if match else None


def _commit_from_git(root: Path) -> str | None:
    git = shutil.which("git")
    if git is None or not (root / ".git").exists():
        return None
    head = _run([git, "-C", str(root), "rev-parse", "--short=12", "HEAD"])
    changes = _run([git, "-C", str(root), "status", "--porcelain", "--untracked-files=no"])
    if not head or changes is None:
        return None
    return f"g{head.strip()}" + (".dirty" if changes.strip() else "")


def known_facts() -> dict[str, Any]:
    """What this process has read, or reads now, of the machine that an engine process would read again: the GPUs
    nvidia-smi lists and each visible one's line, nvcc's and the builder's versions, and torch's where torch is
    loaded here already (an engine loads it anyway)."""
    facts: dict[str, Any] = {"gpus_present": _gpus_present(), "nvcc_version": nvcc_version(),
                             "builder_version": builder_version(),
                             "gpu_info": {smi_id: _smi_gpu_info(smi_id) for smi_id in visible_gpu_ids()}}  # fmt: skip
    if "torch" in sys.modules:  # plain strings: torch.__version__ is torch's own str subclass, which would make an
        # engine load torch while it reads its start message, not beside its first clean references
        facts["torch_versions"] = [None if version is None else str(version) for version in torch_versions()]
    return facts


def adopt(facts: dict[str, Any]) -> None:
    """Take what the builder's process read of this machine (`known_facts`) instead of reading it again."""
    _GIVEN.clear()
    _GIVEN.update(facts)
    for cached in (_gpus_present, _smi_gpu_info, nvcc_version, torch_versions, builder_version):
        cached.cache_clear()


def environment_fields(backend: str, device_index: int = 0) -> dict[str, str | None]:
    """Record fields of the environment group (seed_policy and created_at are set by the engine)."""
    torch_version, cuda_version = torch_versions()
    fields: dict[str, str | None] = {
        "torch_version": torch_version,
        "cuda_version": cuda_version,
        "builder_version": builder_version(),
        "gpu_name": None,
        "compute_capability": None,
        "driver_version": None,
        "nvcc_version": None,
    }
    if backend == "cuda":
        info = gpu_info(device_index)
        if info:
            fields.update(
                gpu_name=info["name"],
                compute_capability=info["compute_capability"],
                driver_version=info["driver_version"],
            )
        fields["nvcc_version"] = nvcc_version()
    else:
        fields["gpu_name"] = cpu_name()
    return fields
