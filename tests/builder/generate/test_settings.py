"""LLM settings: precedence of flags, env and the config file; keys never come from files."""

from __future__ import annotations

import pytest

from builder.errors import UsageError
from builder.generate.llm.settings import load_llm_settings

CONFIG = """
experiment = "from-file"
[budget]
rounds = 4
max_cost_usd = 1.5
[[model]]
name = "model-a"
base_url = "http://file-endpoint/v1"
api_key_env = "A_KEY"
temperature = 0.2
prompt_usd_per_mtok = 1.0
completion_usd_per_mtok = 2.0
[[model]]
name = "model-b"
prompt_usd_per_mtok = 0.5
completion_usd_per_mtok = 0.5
"""


def test_file_env_and_flags(tmp_path):
    path = tmp_path / "llm.toml"
    path.write_text(CONFIG)
    env = {"A_KEY": "key-a", "OPENAI_API_KEY": "key-default", "OPENAI_BASE_URL": "http://env-endpoint/v1"}
    cfg = load_llm_settings(config_path=path, environ=env)
    a, b = cfg.models
    assert (a.name, a.base_url, a.api_key, a.temperature) == ("model-a", "http://file-endpoint/v1", "key-a", 0.2)
    assert (b.base_url, b.api_key) == ("http://env-endpoint/v1", "key-default")
    assert cfg.budget.rounds == 4 and cfg.budget.max_cost_usd == 1.5 and cfg.experiment == "from-file"
    assert a.cost(1_000_000, 1_000_000) == pytest.approx(3.0)
    assert "key-a" not in repr(cfg)

    flagged = load_llm_settings(
        config_path=path,
        models=["model-b"],
        base_url="http://flag/v1",
        experiment="cli",
        budget_overrides={"rounds": 2, "samples_per_round": None},
        environ=env,
    )
    assert [m.name for m in flagged.models] == ["model-b"] and flagged.models[0].base_url == "http://flag/v1"
    assert flagged.budget.rounds == 2 and flagged.experiment == "cli"


def test_env_only(tmp_path):
    cfg = load_llm_settings(environ={"KA_MODEL": "m", "OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "http://x/v1"})
    assert cfg.models[0].name == "m" and cfg.models[0].api_key == "k" and cfg.models[0].base_url == "http://x/v1"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[model]]\nname = "m"\napi_key = "sk-x"\n', "must not hold an API key"),
        ('api_key = "sk-x"\n', "api_key_env"),
        ('[[model]]\nname = "m"\n[budget]\nmax_cost_usd = 1.0\n', "max_cost_usd needs prices"),
        ('[[model]]\nname = "m"\n[budget]\nrounds = 0\n', "budget.rounds must be at least 1"),
        ('[[model]]\nname = "m"\n[budget]\nspeed = 1\n', "unknown key(s) speed"),
        ("[[model]\n", "not valid TOML"),
    ],
)
def test_bad_config_files(tmp_path, text, message):
    path = tmp_path / "llm.toml"
    path.write_text(text)
    with pytest.raises(UsageError) as info:
        load_llm_settings(config_path=path, environ={})
    assert message in str(info.value) and "sk-x" not in str(info.value)


def test_no_model_is_a_usage_error():
    with pytest.raises(UsageError, match="no LLM model given"):
        load_llm_settings(environ={})
