"""Named outputs across the sandbox boundary as safetensors files, one per name (both sides).

The candidate's child writes what the candidate returned; the clean reference child writes the reference's
outputs; the trusted parent reads both and judges (`judge/outputs.py`). safetensors is a format made to be read from
untrusted files: a bounded JSON header and raw tensor bytes, no code, no pickle.

A named value is a tensor or a (nested) tuple/list of tensors, stored flat as `name#0`, `name#1`, ... with
their devices in the header's metadata; anything else (None, a number, an exception's text) is stored as
its description, so the judge can say what came back instead of tensors. One file per name keeps each under
the sandbox's file-size limit and lets the judge load one output at a time; `index.json`, written last,
lists the names and marks the directory complete.
"""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path
from typing import Any

from builder.verify.protocol.compare import describe, flatten_outputs

META_KEY = "ka_outputs"
INDEX = "index.json"
NAME = re.compile(r"[a-z]+[0-9]*")  # trial0, perturbed2, probe, timing1: never a path


def pack(named: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(flat CPU tensors, description of each name) of named outputs; device tensors are copied to the CPU."""
    tensors: dict[str, Any] = {}
    meta: dict[str, Any] = {}
    for name, value in named.items():
        if isinstance(value, str):
            meta[name] = {"kind": "other", "describe": value}
            continue
        flat = flatten_outputs(value)
        if flat is None:
            meta[name] = {"kind": "other", "describe": describe(value)}
            continue
        meta[name] = {"kind": "tensors", "count": len(flat), "devices": [str(t.device) for t in flat]}
        for index, tensor in enumerate(flat):
            # contiguous private copies: safetensors refuses views and tensors that share storage
            tensor = tensor.detach()
            tensor = tensor.to("cpu") if tensor.device.type != "cpu" else tensor.clone()
            tensors[f"{name}#{index}"] = tensor.contiguous()
    return tensors, meta


def write(path: str | Path, named: dict[str, Any]) -> None:
    write_packed(path, pack(named))


def write_packed(path: str | Path, packed: tuple[dict[str, Any], dict[str, Any]]) -> None:
    from safetensors.torch import save_file

    tensors, meta = packed
    path = Path(path)
    temporary = path.with_name(f".{path.name}.tmp")
    save_file(tensors, str(temporary), metadata={META_KEY: json.dumps(meta)})
    temporary.replace(path)


def pack_each(named: dict[str, Any]) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """name -> `pack` of that name alone: every device copy made now, the files written later (`write_dir`)."""
    return {name: pack({name: value}) for name, value in named.items()}


def write_dir(directory: str | Path, named: dict[str, Any], packed: bool = False) -> None:
    """Each named value in its own file, then the index that marks the directory complete. `packed`: the values
    are `pack_each`'s already."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name, value in named.items():
        write_packed(directory / f"{name}.safetensors", value if packed else pack({name: value}))
    (directory / f".{INDEX}.tmp").write_text(json.dumps(list(named)))
    (directory / f".{INDEX}.tmp").replace(directory / INDEX)


def is_complete(directory: str | Path) -> bool:
    return (Path(directory) / INDEX).exists()


class OutputFileError(Exception):
    """The file is missing, too large, malformed, or does not describe its tensors."""


def read(path: str | Path, max_bytes: int) -> dict[str, list[Any] | str]:
    """name -> list of TensorOnDevice (a CPU copy and the device it was returned on), or the description of a
    non-tensor value. The file is untrusted: every name and count is checked against the tensors."""
    from safetensors import safe_open

    path = Path(path)
    try:
        info = path.lstat()
    except OSError as exc:
        raise OutputFileError(f"no outputs file ({exc.strerror})") from None
    # A link could point the judge at files the candidate did not write (the clean reference's, say).
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        raise OutputFileError(f"{path.name} is not a plain file of its own (a link?)")
    size = info.st_size
    if size > max_bytes:
        raise OutputFileError(f"outputs file of {size} bytes exceeds the {max_bytes}-byte limit")
    try:
        with safe_open(str(path), framework="pt") as handle:
            meta = json.loads((handle.metadata() or {}).get(META_KEY, "null"))
            loaded = {key: handle.get_tensor(key) for key in handle.keys()}
    except Exception as exc:  # noqa: BLE001 - a malformed file from the untrusted side
        raise OutputFileError(f"unreadable outputs file: {type(exc).__name__}: {exc}"[:500]) from None
    return unpack(loaded, meta)


def unpack(tensors: dict[str, Any], meta: Any) -> dict[str, list[Any] | str]:
    """`pack`'s two halves back into name -> list of TensorOnDevice, or the description of a non-tensor value.
    Both halves may come from the untrusted side: every name and count is checked against the tensors."""
    if not isinstance(meta, dict):
        raise OutputFileError("outputs file without its description")
    values: dict[str, list[Any] | str] = {}
    for name, spec in meta.items():
        if not isinstance(spec, dict):
            raise OutputFileError(f"bad description of {name!r}")
        if spec.get("kind") == "other":
            values[str(name)] = str(spec.get("describe"))[:200]
            continue
        count, devices = spec.get("count"), spec.get("devices")
        if not isinstance(count, int) or not isinstance(devices, list) or len(devices) != count:
            raise OutputFileError(f"bad description of {name!r}")
        keys = [f"{name}#{i}" for i in range(count)]
        if any(key not in tensors for key in keys):
            raise OutputFileError(f"outputs file lacks tensors of {name!r}")
        values[str(name)] = [
            TensorOnDevice(tensors[key], str(device)) for key, device in zip(keys, devices, strict=True)
        ]
    return values


class TensorOnDevice:
    """A CPU copy of an output and the device it was returned on (the judge checks the device)."""

    __slots__ = ("tensor", "device")

    def __init__(self, tensor: Any, device: str) -> None:
        self.tensor = tensor
        self.device = device


def tensors_of(value: list[Any] | str | None) -> list[Any] | None:
    return [item.tensor for item in value] if isinstance(value, list) else None


def devices_of(value: list[Any] | str | None) -> list[str]:
    return [item.device for item in value] if isinstance(value, list) else []


class OutputsDir:
    """A directory written by `write_dir`, read one name at a time (each file checked as untrusted)."""

    def __init__(self, directory: str | Path, max_file_bytes: int, keep_loaded: bool = True) -> None:
        self.directory = Path(directory)
        self.max_file_bytes = max_file_bytes
        self.keep_loaded = keep_loaded  # False: read again on each use (a reference kept for a whole build)
        if self.directory.is_symlink() or (self.directory / INDEX).is_symlink():
            raise OutputFileError("the outputs directory or its index is a link")
        try:
            names = json.loads((self.directory / INDEX).read_text())
        except (OSError, ValueError) as exc:
            raise OutputFileError(f"no outputs index ({exc})") from None
        if not isinstance(names, list) or not all(isinstance(n, str) and NAME.fullmatch(n) for n in names):
            raise OutputFileError("bad outputs index")
        self.names = set(names)
        self._loaded: dict[str, Any] = {}

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def get(self, name: str, default: Any = None) -> Any:
        """The value (list of TensorOnDevice, or a description), or `default` for a name not written. A file
        that does not hold what the index promised reads as a description of the fault: never a pass."""
        if name not in self.names:
            return default
        if name in self._loaded:
            return self._loaded[name]
        try:
            value = read(self.directory / f"{name}.safetensors", self.max_file_bytes).get(name)
        except OutputFileError as exc:
            value = f"an unreadable outputs file ({exc})"
        value = value if value is not None else f"an outputs file without {name}"
        if self.keep_loaded:
            self._loaded[name] = value
        return value
