"""Facts about a deployment from its config and litellm's model map."""

from __future__ import annotations

import pytest

from providers.model_info import self_hosted
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
