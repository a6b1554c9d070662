"""The `llm` generator (loop.py) and its parts: settings, client, prompts, extraction, budgets, archive."""

from builder.generate.llm.loop import LLMGenerator
from builder.generate.llm.settings import Budget, LLMSettings, ModelSpec, load_llm_settings

__all__ = ["Budget", "LLMGenerator", "LLMSettings", "ModelSpec", "load_llm_settings"]
