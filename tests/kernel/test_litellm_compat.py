"""What overspill does with each LiteLLM proxy config feature: honoured, or a clear warning."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel.config_loading import ConfigError, LoadedConfig, load_config, parse_config
from kernel.model_routes import WildcardRoutes
from kernel.wildcards import Pattern, most_specific_first


def loaded(text: str, env: dict[str, str] | None = None) -> LoadedConfig:
    return parse_config(text, "config.yaml", env or {})


ONE = "model_list:\n  - {model_name: a, litellm_params: {model: openai/a}}\n"


@pytest.mark.parametrize(
    ("written", "level"),
    [("DEBUG", "debug"), ("Info", "info"), ("WARN", "warning"), ("CRITICAL", "error")],
)
def test_log_level_in_any_case(written: str, level: str) -> None:
    """`log_level: "DEBUG"` (LiteLLM configs' spelling) is the debug level, not an error."""
    config = loaded(ONE + f"general_settings: {{log_level: {written}}}\n")
    assert config.settings.general_settings.log_level == level
    assert config.warnings == []


def test_an_unknown_log_level_is_a_warning_and_info() -> None:
    """A level overspill has no name for is warned about; the server logs at info."""
    config = loaded(ONE + "general_settings: {log_level: TRACE}\n")
    assert config.settings.general_settings.log_level == "info"
    assert config.warnings == [
        "general_settings.log_level: 'TRACE' is not a level overspill knows "
        "(debug, info, warning, error); using info"
    ]


MODEL_FROM_ENV = """
model_list:
  - model_name: assistant
    litellm_params:
      model: os.environ/ASSISTANT_MODEL
      api_base: os.environ/BASE
"""


def test_model_itself_from_the_environment() -> None:
    """`model: os.environ/VAR` is resolved like any other field."""
    entry = loaded(MODEL_FROM_ENV, {"ASSISTANT_MODEL": "openai/qwen", "BASE": "http://x/v1"})
    params = entry.settings.model_list[0].litellm_params
    assert (params.model, params.api_base) == ("openai/qwen", "http://x/v1")


def test_an_unset_model_variable_loads_the_entry_as_unusable() -> None:
    """An unset `model` variable does not fail validation: the entry is marked, and warned."""
    config = loaded(MODEL_FROM_ENV, {"BASE": "http://x/v1"})
    (entry,) = config.settings.model_list
    assert entry.missing_env == ("ASSISTANT_MODEL",)
    assert entry.litellm_params.model == "os.environ/ASSISTANT_MODEL"
    assert config.warnings == [
        "model_list[0] (assistant): environment variable ASSISTANT_MODEL is unset; "
        "requests to this deployment will fail until it is set"
    ]


NESTED = """
model_list:
  - model_name: a
    litellm_params:
      model: openai/a
      extra_headers: {x-tenant: os.environ/TENANT}
      tags: [os.environ/TAG, {deep: os.environ/DEEP}]
    model_info: {id: os.environ/ID}
general_settings:
  master_key: os.environ/MASTER
  store: {backend: redis, url: os.environ/REDIS_URL}
router_settings:
  model_group_alias: {b: os.environ/ALIAS_TARGET}
litellm_settings:
  drop_params: os.environ/DROP
"""


def test_environment_references_in_lists_and_nested_mappings() -> None:
    """`os.environ/VAR` is resolved at any depth, in mappings and lists, in every block
    overspill reads; the secret never reaches a repr."""
    env = {
        "TENANT": "t1", "TAG": "blue", "DEEP": "d", "ID": "id-7", "MASTER": "sk-m",
        "REDIS_URL": "redis://r:6379/0", "ALIAS_TARGET": "a", "DROP": "true",
    }  # fmt: skip
    settings = loaded(NESTED, env).settings
    params = settings.model_list[0].litellm_params.extras()
    assert params["extra_headers"] == {"x-tenant": "t1"}
    assert params["tags"] == ["blue", {"deep": "d"}]
    assert settings.model_list[0].model_info == {"id": "id-7"}
    general = settings.general_settings
    assert general.master_key is not None
    assert general.master_key.get_secret_value() == "sk-m"
    assert general.store.url is not None
    assert settings.router_settings.model_group_alias["b"].model == "a"
    assert settings.drop_params is True
    assert "sk-m" not in repr(settings)


def test_an_unset_reference_leaves_the_setting_at_its_default() -> None:
    """`port: os.environ/PORT` with PORT unset loads with the default port, and says so."""
    config = loaded(ONE + "general_settings: {port: os.environ/PORT}\n")
    assert config.settings.general_settings.port == 4000
    assert config.warnings == [
        "general_settings.port: environment variable PORT is unset; treated as not set"
    ]


def test_unset_references_outside_model_list_name_their_path() -> None:
    """An unset variable in general_settings is warned about at its YAML path, by name only."""
    config = loaded(ONE + "general_settings: {master_key: os.environ/MASTER}\n")
    assert config.settings.general_settings.master_key is None
    assert config.warnings == [
        "general_settings.master_key: environment variable MASTER is unset; treated as not set"
    ]


ENVIRONMENT = """
environment_variables:
  UPSTREAM_KEY: sk-from-config
  REGION: os.environ/AWS_REGION
  RETRIES: 3
  PATH: /tmp/evil
model_list:
  - model_name: a
    litellm_params: {model: openai/a, api_key: os.environ/UPSTREAM_KEY, region: os.environ/REGION}
"""


def test_environment_variables_are_honoured() -> None:
    """LiteLLM's `environment_variables:` feed `os.environ/` references (over the process's own
    variables, as LiteLLM sets them first) and are kept for the server to set; PATH-like
    variables are refused as LiteLLM refuses them."""
    config = loaded(ENVIRONMENT, {"AWS_REGION": "eu-west-1", "UPSTREAM_KEY": "sk-process"})
    params = config.settings.model_list[0].litellm_params
    assert params.api_key is not None
    assert params.api_key.get_secret_value() == "sk-from-config"
    assert params.extras()["region"] == "eu-west-1"
    assert dict(config.environment) == {
        "UPSTREAM_KEY": "sk-from-config",
        "REGION": "eu-west-1",
        "RETRIES": "3",
    }
    assert config.warnings == [
        "environment_variables.PATH: may not be set from the config (as in LiteLLM); ignored"
    ]
    assert not any("sk-" in warning or "/tmp/evil" in warning for warning in config.warnings)


def test_yaml_anchors_and_merge_keys() -> None:
    """Anchors, aliases and `<<:` merge keys give each entry the merged parameters."""
    text = """
model_list:
  - model_name: a
    litellm_params: &base {model: openai/a, api_base: "http://x/v1", api_key: k}
  - model_name: b
    litellm_params:
      <<: *base
      model: openai/b
  - model_name: c
    litellm_params: *base
"""
    models = loaded(text).settings.model_list
    assert [m.litellm_params.model for m in models] == ["openai/a", "openai/b", "openai/a"]
    assert {m.litellm_params.api_base for m in models} == {"http://x/v1"}


def test_crlf_line_ends_read_like_lf() -> None:
    """A file with Windows line ends gives the same settings as the LF file."""
    text = ONE + "general_settings: {master_key: sk-1, log_level: DEBUG}\n"
    lf = loaded(text).settings
    crlf = loaded(text.replace("\n", "\r\n")).settings
    assert crlf == lf


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_include_merges_like_litellm(tmp_path: Path) -> None:
    """Included files extend lists (model_list) and replace other values; a nested include is
    relative to the file that names it; a file is read once."""
    write(
        tmp_path / "models" / "one.yaml",
        "model_list:\n  - {model_name: b, litellm_params: {model: openai/b}}\ninclude: [two.yaml, ../models/one.yaml]\n",
    )
    write(
        tmp_path / "models" / "two.yaml",
        "model_list:\n  - {model_name: c, litellm_params: {model: openai/c}}\ngeneral_settings: {port: 5000}\n",
    )
    main = write(
        tmp_path / "config.yaml",
        ONE + "include: [models/one.yaml]\ngeneral_settings: {port: 4001, master_key: sk-1}\n",
    )
    config = load_config(main, env={})
    assert config.settings.model_names() == ["a", "b", "c"]
    assert config.settings.general_settings.port == 5000
    assert config.settings.general_settings.master_key is None  # replaced, as in LiteLLM
    assert config.warnings == []


def test_a_missing_include_stops_startup_with_its_name(tmp_path: Path) -> None:
    """LiteLLM refuses a config whose included file is missing; so does overspill, by name."""
    main = write(tmp_path / "config.yaml", ONE + "include: [nowhere.yaml]\n")
    with pytest.raises(ConfigError) as caught:
        load_config(main, env={})
    assert caught.value.problems == ["include: file not found: nowhere.yaml"]


def test_include_must_be_a_list(tmp_path: Path) -> None:
    """`include: file.yaml` (not a list) is refused, as LiteLLM refuses it."""
    main = write(tmp_path / "config.yaml", ONE + "include: other.yaml\n")
    with pytest.raises(ConfigError) as caught:
        load_config(main, env={})
    assert caught.value.problems == ["include: must be a list of file paths"]


def test_no_model_list_loads_with_a_warning() -> None:
    """A config with no models (LiteLLM would load them from its database) starts, and says
    every request will be refused."""
    config = loaded("general_settings: {master_key: sk-1, store_model_in_db: true}\n")
    assert config.settings.model_list == ()
    assert (
        "model_list: no models are configured; every request gets 404 model_not_found "
        "(LiteLLM can add models from its database; overspill has none)"
    ) in config.warnings


def test_empty_blocks_are_accepted() -> None:
    """`general_settings:` with every line commented out (null) is an empty block."""
    config = loaded(ONE + "general_settings:\nlitellm_settings:\nrouter_settings:\n")
    assert config.settings.general_settings.port == 4000
    assert config.warnings == []


WARNED = """
model_list:
  - model_name: a
    litellm_params: {model: openai/a, api_key: sk-upstream-secret}
general_settings:
  master_key: sk-master-secret
  database_url: postgresql://user:db-secret@host/db
  alerting: [slack]
litellm_settings:
  success_callback: [langfuse]
  callbacks: custom_callbacks.proxy_handler_instance
  cache: true
  cache_params: {type: redis, password: redis-secret}
router_settings:
  routing_strategy: least-busy
  redis_password: router-secret
  fallbacks: [{a: [b]}]
guardrails:
  - guardrail_name: g
wiwi_settings: {drop_params: true}
"""


def test_what_overspill_cannot_honour_is_named_with_what_it_does_instead() -> None:
    """Each ignored key gets one line: its YAML path and what overspill does instead."""
    warnings = loaded(WARNED).warnings
    callbacks = "overspill cannot run LiteLLM callbacks (it logs one JSON line per request instead)"
    assert sorted(warnings) == sorted(
        [
            "general_settings.database_url: overspill keeps no database (no virtual keys, spend "
            "logs or models stored in a database): it serves the models in model_list; ignored",
            "general_settings.alerting: overspill sends no alerts; ignored",
            f"litellm_settings.success_callback: {callbacks}; ignored",
            f"litellm_settings.callbacks: {callbacks}; ignored",
            "litellm_settings.cache: overspill does not cache responses; ignored",
            "litellm_settings.cache_params: overspill does not cache responses; ignored",
            "router_settings.routing_strategy: overspill's router sends a model's requests to its "
            "deployments in turn and fails over to the next deployment once; ignored",
            "router_settings.redis_password: overspill's router sends a model's requests to its "
            "deployments in turn and fails over to the next deployment once; ignored",
            "router_settings.fallbacks: overspill does not fall back to other model names; a "
            "conversation that outgrows the window is condensed instead; ignored",
            "guardrails: overspill runs no guardrails; ignored",
            "wiwi_settings: not a setting overspill knows; ignored",
        ]
    )


def test_no_warning_carries_a_secret() -> None:
    """Warnings name keys and variables, never values."""
    for warning in loaded(WARNED).warnings:
        assert "secret" not in warning, warning


ALIASES = """
model_list:
  - {model_name: gpt-4o, litellm_params: {model: openai/gpt-4o}}
  - {model_name: "anthropic/*", litellm_params: {model: "anthropic/*"}}
router_settings:
  model_group_alias:
    gpt-4: gpt-4o
    GPT-4o: {model: gpt-4o, hidden: true}
    claude: anthropic/claude-sonnet-4-5
    nowhere: gpt-5
    broken: [gpt-4o]
"""


def test_model_group_alias_both_forms_and_bad_targets() -> None:
    """Both of LiteLLM's alias forms load; an alias to a model nobody serves, or of a shape
    LiteLLM ignores at request time, is a warning and is dropped."""
    config = loaded(ALIASES)
    aliases = config.settings.router_settings.model_group_alias
    assert {name: (a.model, a.hidden) for name, a in aliases.items()} == {
        "gpt-4": ("gpt-4o", False),
        "GPT-4o": ("gpt-4o", True),
        "claude": ("anthropic/claude-sonnet-4-5", False),
    }
    assert sorted(config.warnings) == [
        "router_settings.model_group_alias.broken: needs a model_name (alias: model_name, or "
        "alias: {model: model_name, hidden: true}); ignored",
        "router_settings.model_group_alias.nowhere: 'gpt-5' is not a model_name in model_list; "
        "ignored",
    ]


def test_an_alias_shadowing_a_model_name_is_said() -> None:
    """As in LiteLLM the alias wins over a model_name it repeats, and the warning says so."""
    text = ONE + "  - {model_name: b, litellm_params: {model: openai/b}}\n"
    config = loaded(text + "router_settings: {model_group_alias: {a: b}}\n")
    assert config.warnings == [
        "router_settings.model_group_alias.a: 'a' is also a model_name in model_list; as in "
        "LiteLLM, the alias wins and its requests go to 'b'"
    ]


WILDCARDS = """
model_list:
  - {model_name: "*", litellm_params: {model: "openai/*", api_base: "http://any/v1"}}
  - {model_name: "openai/*", litellm_params: {model: "openai/*"}}
  - {model_name: "openai/gpt-4o-*", litellm_params: {model: "azure/gpt-4o-*"}}
  - {model_name: "llmengine/fo::*::static::*", litellm_params: {model: "openai/fo::*::static::*"}}
  - {model_name: "*meta.llama3*", litellm_params: {model: "bedrock/meta.llama3*"}}
"""


@pytest.mark.parametrize(
    ("requested", "served_by", "upstream"),
    [
        ("openai/gpt-4o", "openai/*", "openai/gpt-4o"),
        ("openai/gpt-4o-mini", "openai/gpt-4o-*", "azure/gpt-4o-mini"),
        ("gpt-4o", "*", "openai/gpt-4o"),
        (
            "llmengine/fo::bar::static::baz",
            "llmengine/fo::*::static::*",
            "openai/fo::bar::static::baz",
        ),
        # more `*`s in the pattern than in the model: LiteLLM's code (not its docstring)
        # sends the requested name as it is
        ("hello-world-meta.llama3-70b", "*meta.llama3*", "hello-world-meta.llama3-70b"),
    ],
)
def test_wildcards_match_like_litellm(requested: str, served_by: str, upstream: str) -> None:
    """The most specific matching pattern serves the name, its `*`s substituted into
    `litellm_params.model` (the examples in LiteLLM's `set_deployment_model_name`)."""
    settings = loaded(WILDCARDS).settings
    (entry,) = WildcardRoutes(settings).match(requested)
    original = next(e for e in settings.model_list if e.model_name == served_by)
    assert entry.litellm_params.model == upstream
    assert entry.model_name == requested
    assert entry.litellm_params.api_base == original.litellm_params.api_base


def test_patterns_sort_most_specific_first() -> None:
    """Longer patterns are tried first, as LiteLLM sorts them."""
    order = [p.name for p in most_specific_first(["*", "openai/*", "openai/gpt-4o-*"])]
    assert order == ["openai/gpt-4o-*", "openai/*", "*"]
    assert Pattern.of("openai/*").match("anthropic/claude") is None
