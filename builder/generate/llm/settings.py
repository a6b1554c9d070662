"""LLM generator settings: endpoints, models, sampling and budgets from flags, env and a TOML file.

Precedence: explicit arguments (CLI flags) > environment (OPENAI_BASE_URL, OPENAI_API_KEY, KA_MODEL) >
config file (--llm-config or $KA_LLM_CONFIG) > builder.config defaults. A config file names the
environment variable that holds each endpoint's key (`api_key_env`), never the key itself, so a file
that is shared or committed cannot leak it.

    experiment = "sweep-1"
    [budget]
    rounds = 3
    samples_per_round = 2
    concurrency = 4
    max_tokens = 8192          # per response
    max_total_tokens = 2000000 # over the whole run, prompt + completion
    max_cost_usd = 20.0        # over the whole run; needs prices for every model
    [[model]]
    name = "qwen2.5-coder-32b"        # model id sent to the endpoint and written to records
    base_url = "http://localhost:8000/v1"
    api_key_env = "VLLM_KEY"
    temperature = 0.8
    top_p = 0.95
    prompt_usd_per_mtok = 0.0
    completion_usd_per_mtok = 0.0
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from builder import config
from builder.errors import UsageError

MODEL_KEYS = {
    "name",
    "base_url",
    "api_key_env",
    "temperature",
    "top_p",
    "max_tokens",
    "prompt_usd_per_mtok",
    "completion_usd_per_mtok",
}
BUDGET_KEYS = {"rounds", "samples_per_round", "concurrency", "max_tokens", "max_total_tokens", "max_cost_usd"}
TOP_KEYS = {"experiment", "budget", "model"}


@dataclass(frozen=True)
class Budget:
    rounds: int = config.LLM_ROUNDS
    samples_per_round: int = config.LLM_SAMPLES_PER_ROUND
    concurrency: int = config.LLM_CONCURRENCY
    max_tokens: int = config.LLM_MAX_TOKENS  # per response
    max_total_tokens: int | None = None  # prompt + completion over the whole run
    max_cost_usd: float | None = None  # over the whole run


@dataclass(frozen=True)
class ModelSpec:
    name: str
    base_url: str | None = None
    # The key itself: read from the environment at load time, excluded from repr so it never
    # reaches a log line through a dataclass print.
    api_key: str | None = field(default=None, repr=False)
    temperature: float = config.LLM_TEMPERATURE
    top_p: float = config.LLM_TOP_P
    max_tokens: int | None = None  # overrides the budget's per-response cap for this model
    prompt_usd_per_mtok: float | None = None
    completion_usd_per_mtok: float | None = None

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float | None:
        if self.prompt_usd_per_mtok is None or self.completion_usd_per_mtok is None:
            return None
        return (prompt_tokens * self.prompt_usd_per_mtok + completion_tokens * self.completion_usd_per_mtok) / 1e6


@dataclass(frozen=True)
class LLMSettings:
    models: tuple[ModelSpec, ...]
    budget: Budget = Budget()
    experiment: str | None = None

    def secrets(self) -> list[str]:
        """Every API key in use, for redaction."""
        return [m.api_key for m in self.models if m.api_key]


def _number(value: Any, where: str, kind: type, minimum: float | None = None) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
        raise UsageError(f"{where} must be a{'n integer' if kind is int else ' number'}")
    if minimum is not None and value < minimum:
        raise UsageError(f"{where} must be at least {minimum}")
    return kind(value)


def _read_file(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise UsageError(f"{path}: unreadable LLM config ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML ({exc})") from None
    unknown = sorted(set(data) - TOP_KEYS)
    if unknown:
        hint = " (name the variable holding the key with api_key_env)" if "api_key" in unknown else ""
        raise UsageError(f"{path}: unknown key(s) {', '.join(unknown)}{hint}")
    return data


def _budget_from(raw: dict[str, Any], where: str) -> dict[str, Any]:
    unknown = sorted(set(raw) - BUDGET_KEYS)
    if unknown:
        raise UsageError(f"{where} [budget]: unknown key(s) {', '.join(unknown)}")
    out: dict[str, Any] = {}
    for key, value in raw.items():
        kind = float if key == "max_cost_usd" else int
        minimum = 0 if key in ("max_cost_usd", "max_total_tokens") else 1
        out[key] = _number(value, f"{where} budget.{key}", kind, minimum)
    return out


def _model_from(raw: Any, where: str, env: Any) -> ModelSpec:
    if not isinstance(raw, dict):
        raise UsageError(f"{where}: each [[model]] must be a table")
    if "api_key" in raw:
        raise UsageError(f"{where}: a config file must not hold an API key; set api_key_env to the variable holding it")
    unknown = sorted(set(raw) - MODEL_KEYS)
    if unknown:
        raise UsageError(f"{where}: unknown model key(s) {', '.join(unknown)}")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise UsageError(f"{where}: every [[model]] needs a name")
    key_env = raw.get("api_key_env", "OPENAI_API_KEY")
    values: dict[str, Any] = {"name": name, "base_url": raw.get("base_url"), "api_key": env.get(key_env)}
    for key in ("temperature", "top_p", "prompt_usd_per_mtok", "completion_usd_per_mtok"):
        if key in raw:
            values[key] = _number(raw[key], f"{where} model {name}: {key}", float, 0)
    if "max_tokens" in raw:
        values["max_tokens"] = _number(raw["max_tokens"], f"{where} model {name}: max_tokens", int, 1)
    return ModelSpec(**values)


def load_llm_settings(
    config_path: str | Path | None = None,
    models: list[str] | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    experiment: str | None = None,
    temperature: float | None = None,
    budget_overrides: dict[str, Any] | None = None,
    environ: dict[str, str] | None = None,
) -> LLMSettings:
    """Resolve the settings of an LLM run (see the module docstring for precedence)."""
    env = os.environ if environ is None else environ
    path = config_path or env.get(config.LLM_CONFIG_ENV)
    data = _read_file(Path(path)) if path else {}
    where = str(path) if path else "LLM settings"
    budget_values = _budget_from(data.get("budget", {}), where)
    for key, value in (budget_overrides or {}).items():
        if value is not None:
            budget_values.update(_budget_from({key: value}, "flag"))
    budget = Budget(**budget_values)

    specs = [_model_from(raw, where, env) for raw in data.get("model", [])]
    names = models or ([env["KA_MODEL"]] if env.get("KA_MODEL") else [])
    if names:
        # Models named by flag/env: reuse a file entry of the same name (its prices), else a bare spec.
        by_name = {s.name: s for s in specs}
        specs = [by_name.get(n, ModelSpec(name=n, api_key=env.get("OPENAI_API_KEY"))) for n in names]
    if not specs:
        raise UsageError("no LLM model given: pass --model, set KA_MODEL, or list [[model]] in an LLM config file")
    env_url = env.get("OPENAI_BASE_URL")
    resolved = []
    for spec in specs:
        changes: dict[str, Any] = {}
        if base_url or (spec.base_url is None and env_url):
            changes["base_url"] = base_url or env_url
        if api_key:
            changes["api_key"] = api_key
        elif spec.api_key is None and env.get("OPENAI_API_KEY"):
            changes["api_key"] = env["OPENAI_API_KEY"]
        if temperature is not None:
            changes["temperature"] = float(temperature)
        resolved.append(replace(spec, **changes))
    if budget.max_cost_usd is not None:
        unpriced = [s.name for s in resolved if s.cost(0, 0) is None]
        if unpriced:
            raise UsageError(
                f"max_cost_usd needs prices (prompt_usd_per_mtok, completion_usd_per_mtok) for model(s) {', '.join(unpriced)}"
            )
    names_seen = [s.name for s in resolved]
    if len(set(names_seen)) != len(names_seen):
        raise UsageError(f"model listed twice: {', '.join(sorted({n for n in names_seen if names_seen.count(n) > 1}))}")
    return LLMSettings(models=tuple(resolved), budget=budget, experiment=experiment or data.get("experiment"))
