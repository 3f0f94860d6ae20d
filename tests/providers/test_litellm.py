"""litellm deployments: what a request may not set. (Answers, errors and streams of an
Anthropic deployment on `litellm.acompletion` are tested with the other two Anthropic paths,
tests/providers/test_anthropic.py.)"""

from __future__ import annotations

import litellm
import orjson
import pytest

from kernel.errors import ForbiddenParameter, UpstreamError
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


def _wrapped(cause: BaseException) -> litellm.exceptions.APIConnectionError:
    """`cause` as litellm's catch-all reports it: a connection error raised while handling
    it, a traceback appended."""
    wrapped = litellm.exceptions.APIConnectionError(
        message=f"{cause}\nTraceback (most recent call last):\n  File \"/x.py\"",
        llm_provider="gemini", model="gemini-2.0-flash",
    )  # fmt: skip
    wrapped.__context__ = cause
    return wrapped


def test_litellms_own_failure_is_not_reported_as_the_connections(
    provider: LitellmProvider,
) -> None:
    """An exception of litellm's own code that litellm wraps as a connection error is said
    to be litellm's, in its words without the traceback; a refused connection still reads as
    one (without the TLS context's address)."""
    own = provider.translate(_wrapped(KeyError("usageMetadata")))
    assert isinstance(own, UpstreamError)
    assert "not a connection error" in own.message
    assert "usageMetadata" in own.message
    assert "Traceback" not in own.message
    refused = provider.translate(
        _wrapped(OSError("Cannot connect to host h:443 ssl:<ssl.SSLContext object at 0x7f0a>"))
    )
    assert (
        refused.message == "cannot reach upstream anthropic: Cannot connect to host h:443 ssl:TLS"
    )


def test_a_failed_connection_litellm_reports_as_its_500_reads_as_one(
    provider: LitellmProvider,
) -> None:
    """litellm reports some providers' failed connections (a text completion's, Cohere's) as
    its 500 under another provider's name: the error names the configured provider and says
    the upstream could not be reached, in the provider's words alone."""
    said = "InternalServerError: OpenAIException - Cannot connect to host h:443 ssl:default"
    failed = litellm.exceptions.InternalServerError(
        message=said, llm_provider="openai", model="claude-sonnet-4-5"
    )
    failed.__context__ = OSError("Connect call failed")
    error = provider.translate(failed)
    assert isinstance(error, UpstreamError)
    assert (
        error.message == "cannot reach upstream anthropic: Cannot connect to host h:443 ssl:default"
    )
    without = provider.translate(
        litellm.exceptions.InternalServerError(
            message="OpenAIException - overloaded", llm_provider="openai", model="m"
        )
    )
    assert without.message == "upstream anthropic failed (500): overloaded"
