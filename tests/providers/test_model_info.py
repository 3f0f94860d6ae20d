"""Facts about a deployment from its config and litellm's model map."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import orjson
import pytest

from kernel.config import ModelEntry
from kernel.config_loading import ConfigError, parse_config
from kernel.model_modes import MODE_APIS
from providers.model_info import (
    known_mode,
    mode_of,
    route_refusal,
    routes_served,
    self_hosted,
)
from tests.conftest import settings_from


def deployment(params: str) -> bool:
    """Whether the one deployment with these `litellm_params` counts as self-hosted."""
    config = f"model_list:\n  - model_name: m\n    litellm_params: {params}\n"
    return self_hosted(settings_from(config).model_list[0])


@pytest.mark.parametrize(
    "params",
    [
        '{model: openai/local, api_base: "http://127.0.0.1:8080/v1"}',
        '{model: openai/local, api_base: "http://localhost:8080/v1"}',
        '{model: openai/local, api_base: "http://[::1]:8080/v1"}',
        '{model: openai/qwen, api_base: "http://10.0.3.7:8000/v1"}',
        '{model: openai/qwen, api_base: "http://192.168.1.20:8000/v1"}',
        '{model: openai/qwen, api_base: "http://llama:8080/v1"}',
        '{model: openai/qwen, api_base: "http://vllm.inference.svc.cluster.local/v1"}',
        '{model: ollama_chat/llama3.1, api_base: "https://ollama.example.com"}',
        "{model: hosted_vllm/meta-llama/Llama-3.1-8B-Instruct}",
    ],
)
def test_servers_the_user_runs_are_self_hosted(params: str) -> None:
    """Loopback, private addresses, bare service names and self-hosted providers count."""
    assert deployment(params)


@pytest.mark.parametrize(
    "params",
    [
        "{model: openai/gpt-4o}",
        "{model: anthropic/claude-3-5-sonnet-20240620}",
        '{model: openai/meta-llama/Llama-3-70b, api_base: "https://api.together.xyz/v1"}',
        '{model: openai/custom, api_base: "http://8.8.8.8/v1"}',
        '{model: openai/custom, api_base: "http://[2001:4860::8888]/v1"}',
        '{model: openai/gpt-4o, api_base: "http://localhost:4000/v1"}',
    ],
)
def test_priced_or_public_apis_are_not(params: str) -> None:
    """A public host, or a model litellm's map prices (even behind a local gateway), does not."""
    assert not deployment(params)


# -- modes: which of overspill's routes a deployment serves -----------------------------------


def entry(params: str, info: str = "") -> ModelEntry:
    """The one deployment of a config with these `litellm_params` (and `model_info`)."""
    extra = f"    model_info: {info}\n" if info else ""
    config = f"model_list:\n  - model_name: m\n    litellm_params: {params}\n{extra}"
    return settings_from(config).model_list[0]


@pytest.mark.parametrize(
    ("params", "info", "mode"),
    [
        ("{model: openai/gpt-4o}", "", "chat"),
        ("{model: openai/text-embedding-3-small}", "", "embedding"),
        ("{model: openai/gpt-3.5-turbo-instruct}", "", "completion"),
        ("{model: openai/text-embedding-3-small}", "{mode: chat}", "chat"),
        ("{model: openai/my-local-model}", "", None),
    ],
)
def test_the_mode_is_configured_else_litellms(params: str, info: str, mode: str | None) -> None:
    """`model_info.mode` wins; litellm's map answers for the models it knows; else unknown."""
    assert mode_of(entry(params, info)) == mode


@pytest.mark.parametrize(
    ("params", "info", "routes"),
    [
        (
            "{model: openai/x}",
            "{mode: chat}",
            ["/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/completions"],
        ),
        ("{model: openai/x}", "{mode: embedding}", ["/v1/embeddings"]),
        ("{model: openai/x}", "{mode: completion}", ["/v1/completions"]),
        ("{model: openai/x}", "{mode: image_generation}", []),
        (
            "{model: openai/x}",
            "",
            [
                "/v1/chat/completions",
                "/v1/responses",
                "/v1/messages",
                "/v1/completions",
                "/v1/embeddings",
            ],
        ),
        (
            "{model: anthropic/claude-new}",
            "",
            ["/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/completions"],
        ),
    ],
)
def test_routes_follow_the_mode_and_the_providers_api(
    params: str, info: str, routes: list[str]
) -> None:
    """Each mode serves its routes; an unknown one all (the upstream decides), less what the
    provider's API lacks (Anthropic has no embeddings)."""
    assert routes_served(entry(params, info)) == routes


def test_a_refusal_names_the_model_the_route_and_what_it_serves() -> None:
    """What a 400 says: the model as the client named it, the route, why, what it serves."""
    refused = route_refusal(entry("{model: openai/x}", "{mode: embedding}"), "chat", "alias")
    assert refused == (
        "model 'alias' cannot serve /v1/chat/completions: its model_info.mode is embedding; "
        "it serves /v1/embeddings"
    )
    assert route_refusal(entry("{model: openai/x}", "{mode: chat}"), "responses") is None
    assert route_refusal(entry("{model: openai/x}"), "embeddings") is None
    image = route_refusal(entry("{model: openai/x}", "{mode: image_generation}"), "chat")
    assert image is not None
    assert image.endswith("it serves none of overspill's routes")


def test_an_unknown_mode_is_a_config_error_at_its_path() -> None:
    """A misspelt mode stops the config from loading, naming its YAML path and the modes."""
    config = (
        "model_list:\n  - model_name: m\n    litellm_params: {model: openai/x}\n"
        "    model_info: {mode: embeddings}\n"
    )
    with pytest.raises(ConfigError) as raised:
        parse_config(config, "config.yaml", {})
    (problem,) = raised.value.problems
    assert problem.startswith("model_list[0].model_info: mode 'embeddings' is not")
    assert "chat, responses, completion, embedding" in problem


def test_every_mode_in_litellms_map_is_one_overspill_reads() -> None:
    """Each mode litellm's bundled map gives a model (its sample spec aside) is in the table,
    so a LiteLLM config that copies one loads."""
    spec = importlib.util.find_spec("litellm")
    assert spec is not None
    assert spec.submodule_search_locations
    folder = Path(next(iter(spec.submodule_search_locations)))
    table = orjson.loads((folder / "model_prices_and_context_window_backup.json").read_bytes())
    modes = {info.get("mode") for name, info in table.items() if name != "sample_spec"}
    assert modes - {None} <= set(MODE_APIS)
    assert known_mode("openai/text-embedding-3-small") == "embedding"
