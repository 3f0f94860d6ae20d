"""litellm deployments: what a request may not set. (Answers, errors and streams of an
Anthropic deployment on `litellm.acompletion` are tested with the other two Anthropic paths,
tests/providers/test_anthropic.py.)"""

from __future__ import annotations

import orjson
import pytest

from kernel.errors import ForbiddenParameter
from providers.litellm import LitellmProvider
from proxy.http import parse_chat_request
from tests.conftest import settings_from


@pytest.fixture
def provider() -> LitellmProvider:
    settings = settings_from(
        "model_list:\n  - model_name: claude\n    litellm_params:\n"
        "      {model: anthropic/claude-sonnet-4-5, api_key: sk-ant-config, max_retries: 0}\n"
    )
    return LitellmProvider(settings.model_list[0])


def chat(**fields: object) -> bytes:
    return orjson.dumps(
        {"model": "claude", "messages": [{"role": "user", "content": "hi"}], **fields}
    )


@pytest.mark.parametrize(
    "field",
    ["num_retries", "fallbacks", "context_window_fallback_dict", "cache", "timeout", "drop_params"],
)
def test_litellm_settings_cannot_come_from_a_request(provider: LitellmProvider, field: str) -> None:
    """A body field litellm would read as its own setting is refused, naming it."""
    with pytest.raises(ForbiddenParameter) as caught:
        provider.kwargs(parse_chat_request(chat(**{field: 1})))
    assert caught.value.param == field
