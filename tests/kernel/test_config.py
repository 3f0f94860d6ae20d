"""config.yaml validation: paths in errors, secrets from the environment, LiteLLM compatibility."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.main import main
from kernel.config_loading import ConfigError, load_config, parse_config

ROOT = Path(__file__).resolve().parents[2]


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "config.yaml", {})
    return caught.value.problems


def test_shipped_config_is_valid() -> None:
    """The config.yaml in the repository loads; unset provider keys are warnings."""
    loaded = load_config(ROOT / "config.yaml", env={})
    assert "local" in loaded.settings.model_names()
    assert any("OPENAI_API_KEY" in w for w in loaded.warnings)


def test_missing_model_names_its_yaml_path() -> None:
    """A deployment without litellm_params.model is reported at its YAML path."""
    text = """
model_list:
  - model_name: a
    litellm_params: {model: openai/a}
  - model_name: b
    litellm_params: {model: openai/b}
  - model_name: c
    litellm_params: {api_base: "http://x"}
"""
    assert problems(text) == ["model_list[2].litellm_params.model: field required"]


def test_health_check_settings_are_checked_at_their_yaml_path() -> None:
    """LiteLLM's `health_check_timeout` and `health_check_model`, which `GET /health` reads,
    are refused at startup when they cannot be used."""
    text = """
model_list:
  - model_name: a
    litellm_params: {model: openai/a}
    model_info: {health_check_timeout: 0}
  - model_name: "openai/*"
    litellm_params: {model: "openai/*"}
    model_info: {health_check_model: 4}
"""
    assert problems(text) == [
        "model_list[0].model_info: health_check_timeout must be a number of seconds above 0, got 0",
        "model_list[1].model_info: health_check_model must be a model name, got 4",
    ]


def test_every_problem_is_one_line() -> None:
    """Several mistakes give one line each."""
    text = """
model_list:
  - litellm_params: {model: openai/a}
    context: {window: -5, windw: 3}
general_settings: {port: 99999}
"""
    assert problems(text) == [
        "model_list[0].model_name: field required",
        "model_list[0].context.window: input should be greater than 0",
        "model_list[0].context.windw: unknown setting (check the spelling)",
        "general_settings.port: input should be less than or equal to 65535",
    ]


def test_bad_yaml_says_where() -> None:
    """A YAML syntax error names the line and column."""
    (line,) = problems("model_list:\n  - model_name: [unclosed\n")
    assert line.startswith("line 3, column 1: not valid YAML")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "the file is empty; it needs at least a model_list"),
        ("- a\n- b\n", "the top level must be a mapping (model_list: ..., ...)"),
    ],
)
def test_degenerate_files(text: str, expected: str) -> None:
    """Empty files and lists are refused with a clear line (LiteLLM refuses them too)."""
    assert problems(text) == [expected]


def test_secrets_come_from_the_environment() -> None:
    """`os.environ/VAR` is replaced by the variable's value."""
    text = "model_list:\n  - model_name: a\n    litellm_params: {model: openai/a, api_key: os.environ/K}\n"
    settings = parse_config(text, "c", {"K": "sk-123"}).settings
    key = settings.model_list[0].litellm_params.api_key
    assert key is not None
    assert key.get_secret_value() == "sk-123"
    assert "sk-123" not in repr(settings)


def test_unset_secret_is_a_warning_naming_model_and_variable() -> None:
    """A deployment whose variable is unset loads, is marked, and is warned about."""
    text = "model_list:\n  - model_name: a\n    litellm_params: {model: openai/a, api_key: os.environ/K}\n"
    loaded = parse_config(text, "c", {})
    assert loaded.settings.model_list[0].missing_env == ("K",)
    assert loaded.warnings == [
        "model_list[0] (a): environment variable K is unset; "
        "requests to this deployment will fail until it is set"
    ]


def test_litellm_keys_we_ignore_are_warnings() -> None:
    """A LiteLLM proxy config loads; the settings overspill does not act on are named."""
    text = """
model_list:
  - model_name: a
    litellm_params: {model: openai/a, rpm: 10}
    tpm: 5
litellm_settings: {drop_params: true, set_verbose: false}
router_settings: {routing_strategy: simple-shuffle}
general_settings: {master_key: sk-1, database_url: "postgres://x"}
"""
    loaded = parse_config(text, "c", {})
    assert loaded.settings.drop_params is True
    assert sorted(loaded.warnings) == [
        "general_settings.database_url: overspill keeps no database (no virtual keys, spend "
        "logs or models stored in a database): it serves the models in model_list; ignored",
        "litellm_settings.set_verbose: overspill's logging is set by general_settings.log_level;"
        " ignored",
        "model_list[0].tpm: not an overspill setting; ignored",
        "router_settings.routing_strategy: overspill's router sends a model's requests to its "
        "deployments in turn and fails over to the next deployment once; ignored",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("model_list: a\n", "model_list: input should be a list (lines starting with '- ')"),
        (
            "model_list:\n  - {model_name: a, litellm_params: [openai/a]}\n",
            "model_list[0].litellm_params: input should be a mapping (key: value lines)",
        ),
        (
            "model_list:\n  - {model_name: a, litellm_params: {model: openai/a}}\n"
            "general_settings: [port]\n",
            "general_settings: input should be a mapping (key: value lines)",
        ),
    ],
)
def test_a_wrong_shape_is_named_in_yaml_words(text: str, expected: str) -> None:
    """A list or a mapping in the wrong place is named as YAML writes them, not as Python's
    tuple or a schema's class."""
    assert problems(text) == [expected]


def test_a_check_across_settings_names_its_path_once() -> None:
    """A check made over the whole file (the extraction model is configured) opens with the
    path it is about, with no "(top level)" or "value error" before it."""
    text = (
        "model_list:\n  - model_name: a\n    litellm_params: {model: openai/a}\n"
        "    context: {window: 4096, extraction_model: nope}\n"
    )
    assert problems(text) == [
        "model_list[0].context.extraction_model: 'nope' is not a configured model_name "
        "(configured: a)"
    ]


@pytest.mark.parametrize("base", ["not a url", "localhost:11434", "ftp://host/v1", "http://", ""])
def test_an_api_base_that_is_no_http_url_is_a_warning_naming_its_path(base: str) -> None:
    """An api_base that is no http(s) URL with a host is reported at its YAML path, saying how
    to write it and not repeating it; the config loads, as LiteLLM loads it."""
    text = (
        "model_list:\n  - model_name: a\n    litellm_params: {model: openai/a}\n"
        f"  - model_name: b\n    litellm_params: {{model: openai/b, api_base: '{base}'}}\n"
    )
    loaded = parse_config(text, "c", {})
    assert loaded.warnings == [
        "model_list[1] (b): litellm_params.api_base is not an http(s) URL with a host (write "
        "it as http://host:port/v1); requests to this deployment are refused until it is one"
    ]


def test_an_api_base_from_the_environment_is_checked_as_resolved() -> None:
    """`os.environ/VAR` is checked once replaced: a URL passes, a bare host is warned of."""
    text = "model_list:\n  - model_name: a\n    litellm_params: {model: openai/a, api_base: os.environ/B}\n"
    assert parse_config(text, "c", {"B": "https://gw.example/v1"}).warnings == []
    (warning,) = parse_config(text, "c", {"B": "user:secret@gw.example"}).warnings
    assert "api_base is not an http(s) URL" in warning
    assert "secret" not in warning


def test_repeated_layer_is_an_error() -> None:
    """A layer may appear once in `middleware:`."""
    text = "model_list:\n  - {model_name: a, litellm_params: {model: openai/a}}\nmiddleware: [x, y, x]\n"
    assert problems(text) == ["middleware: each layer may appear once; repeated: x"]


@pytest.mark.parametrize(
    ("params", "passthrough"),
    [
        ("{model: openai/a, api_base: 'http://x/v1', api_key: k, timeout: 5}", True),
        ("{model: gpt-4o}", True),
        ("{model: hosted_vllm/m, api_base: 'http://x/v1'}", True),
        ("{model: anthropic/claude}", False),
        ("{model: openai/a, temperature: 0.2}", False),
        ("{model: ollama_chat/llama3}", False),
    ],
)
def test_which_deployments_take_the_byte_passthrough(params: str, passthrough: bool) -> None:
    """OpenAI-wire providers with only connection settings skip litellm; others use it."""
    text = f"model_list:\n  - model_name: a\n    litellm_params: {params}\n"
    entry = parse_config(text, "c", {}).settings.model_list[0]
    assert entry.uses_passthrough() is passthrough


def test_check_config_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`overspill check-config` exits 0 on a good file and 2 with one line per problem."""
    good = tmp_path / "good.yaml"
    good.write_text("model_list:\n  - {model_name: a, litellm_params: {model: openai/a}}\n")
    assert main(["check-config", str(good)]) == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("model_list:\n  - {model_name: a, litellm_params: {}}\nmiddleware: [nope]\n")
    assert main(["check-config", str(bad)]) == 2
    assert capsys.readouterr().err == f"{bad}: model_list[0].litellm_params.model: field required\n"


def test_check_config_cli_refuses_unknown_layers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A layer name that does not exist stops startup, naming its position."""
    path = tmp_path / "c.yaml"
    path.write_text(
        "model_list:\n  - {model_name: a, litellm_params: {model: openai/a}}\nmiddleware: [nope]\n"
    )
    assert main(["check-config", str(path)]) == 2
    assert "middleware[0]: unknown layer 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("tail", "line"),
    [
        (
            "",
            "layers: documents, observation_masking, history_splice, overflow_recovery, "
            "ollama_window (the default",
        ),
        ("middleware: []\n", "layers: none (middleware: [])"),
        ("middleware: [overflow_recovery]\n", "layers: overflow_recovery (middleware:)"),
    ],
)
def test_check_config_says_which_layers_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tail: str, line: str
) -> None:
    """Without a middleware key the recommended layers run, and check-config says so."""
    path = tmp_path / "c.yaml"
    path.write_text("model_list:\n  - {model_name: a, litellm_params: {model: openai/a}}\n" + tail)
    assert main(["check-config", str(path)]) == 0
    assert line in capsys.readouterr().out


def test_missing_file_is_reported(tmp_path: Path) -> None:
    """A config path that does not exist is one clear problem."""
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path / "absent.yaml")
    assert caught.value.problems == ["cannot read the file: No such file or directory"]
