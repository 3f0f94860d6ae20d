"""Client keys in config.yaml: validated at startup, each problem named by its YAML path."""

from __future__ import annotations

import pytest

from kernel.config_loading import ConfigError, LoadedConfig, parse_config

pytestmark = pytest.mark.reliability("tenants")

MODELS = """
model_list:
  - model_name: local
    litellm_params: {model: openai/m, api_base: "http://up.test/v1"}
  - model_name: "openai/*"
    litellm_params: {model: "openai/*"}
router_settings:
  model_group_alias: {fast: local}
general_settings:
  master_key: sk-master
  client_keys:
"""


def loaded(keys: str, env: dict[str, str] | None = None) -> LoadedConfig:
    return parse_config(MODELS + keys, "config.yaml", env or {})


def problems(keys: str, env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as refused:
        loaded(keys, env)
    return refused.value.problems


def test_keys_load_with_names_models_and_litellm_key_alias() -> None:
    """Keys resolve from the environment; `key_alias` is LiteLLM's name for `name`."""
    config = loaded(
        "    - {name: app-a, key: os.environ/A_KEY, models: [local, fast, openai/gpt-4o]}\n"
        "    - {key_alias: app-b, key: sk-b, models: ['openai/*']}\n",
        env={"A_KEY": "sk-a"},
    )
    first, second = config.settings.general_settings.client_keys
    assert (first.name, first.key and first.key.get_secret_value()) == ("app-a", "sk-a")
    assert first.models == ("local", "fast", "openai/gpt-4o")
    assert (second.name, second.models) == ("app-b", ("openai/*",))
    assert config.warnings == []


def test_an_unset_variable_disables_only_that_key_with_one_warning() -> None:
    """A key whose variable is unset is disabled and warned about (never its value)."""
    config = loaded("    - {name: app-a, key: os.environ/A_KEY}\n    - {name: b, key: sk-b}\n")
    assert config.settings.general_settings.client_keys[0].key is None
    assert config.warnings == [
        "general_settings.client_keys[0] (app-a): its key's environment variable is unset; "
        "this key is disabled (its requests get 401) until it is set"
    ]


def test_duplicates_the_master_key_and_missing_keys_are_refused() -> None:
    """Names and keys are unique, no client key is the master key, every entry has a key."""
    assert problems(
        "    - {name: a, key: sk-1}\n    - {name: a, key: sk-1}\n"
        "    - {name: c, key: sk-master}\n    - {name: d}\n    - {name: e, key: '  '}\n"
    ) == [
        "general_settings.client_keys[1].name: 'a' is also the name of client_keys[0]; each "
        "key needs its own name (it is the key's tenant)",
        "general_settings.client_keys[1].key: is also the key of client_keys[0]; each client "
        "key must be unique",
        "general_settings.client_keys[2].key: is the master key; a client key must be a key "
        "of its own",
        "general_settings.client_keys[4].key: is empty; set a key or remove the entry",
        "general_settings.client_keys[3].key: field required",
    ]


@pytest.mark.parametrize("name", ["anonymous", "internal", "0123456789abcdef", "a b", "-x", ""])
def test_reserved_and_malformed_names_are_refused(name: str) -> None:
    """A name is a tenant: never one overspill derives itself, never an odd string."""
    (problem,) = problems(f"    - {{name: '{name}', key: sk-1}}\n")
    assert problem.startswith("general_settings.client_keys[0].name: ")


def test_models_must_be_served_by_the_config() -> None:
    """Each name in `models` must be a model_name, an alias, or served by a wildcard; a
    pattern must match something configured."""
    assert problems("    - {name: a, key: sk-1, models: [local, loc, 'anthropic/*', fast]}\n") == [
        "general_settings.client_keys[0].models[1]: 'loc' is not a model this config serves "
        "(configured: fast, local, openai/*)",
        "general_settings.client_keys[0].models[2]: 'anthropic/*' is not a model this config "
        "serves (configured: fast, local, openai/*)",
    ]
    assert problems("    - {name: a, key: sk-1, models: []}\n") == [
        "general_settings.client_keys[0].models: is empty, so the key could use no model; list "
        "its models or leave models out (every model)"
    ]


def test_a_refusal_never_shows_a_key() -> None:
    """Problem lines name paths and tenants, never a key's value."""
    with pytest.raises(ConfigError) as refused:
        loaded("    - {name: a, key: sk-secret-1}\n    - {name: b, key: sk-secret-1}\n")
    assert "sk-secret-1" not in str(refused.value)
