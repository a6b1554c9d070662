"""Generators: `bundled` (data/candidates), `llm` (any OpenAI-compatible endpoint), `import` (foreign archives).

All share `Generator.run(tasks)` (base.py). `create_generator` is what the build command calls.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builder.errors import UsageError
from builder.generate.base import Generator, drive

GENERATOR_NAMES = ("bundled", "llm", "import")

__all__ = ["GENERATOR_NAMES", "Generator", "create_generator", "drive"]


def create_generator(
    name: str,
    backend: str = "cuda",
    out_dir: Path | None = None,
    source: str | None = None,
    levels: list[int] | None = None,
    llm_options: dict[str, Any] | None = None,
    archive_records: Any = (),
) -> Generator:
    """Build a generator by name.

    `source` is required for `import`; `llm_options` are the keyword arguments of
    `builder.generate.llm.settings.load_llm_settings` (config_path, models, base_url, api_key,
    experiment, temperature, budget_overrides); `archive_records` (records of earlier builds) seed the
    llm generator's innovation archive.
    """
    if name == "bundled":
        from builder.generate.bundled import BundledGenerator

        return BundledGenerator(backend=backend)
    if name == "import":
        if not source:
            raise UsageError("--generator import needs --source PATH_OR_HUB_ID")
        from builder.generate.importers import ImportGenerator

        return ImportGenerator(source, backend=backend, out_dir=out_dir, levels=levels)
    if name == "llm":
        from builder.generate.llm import LLMGenerator, load_llm_settings

        settings = load_llm_settings(**(llm_options or {}))
        return LLMGenerator(settings, backend=backend, out_dir=out_dir, archive_records=archive_records)
    raise UsageError(f"unknown generator '{name}' (expected one of {', '.join(GENERATOR_NAMES)})")
