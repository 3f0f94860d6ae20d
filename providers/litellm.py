"""litellm for every provider that does not speak OpenAI's wire format (the only litellm import).

Request parameters become litellm keyword arguments, except litellm's own settings (its list
of internal params and acompletion's named arguments, beyond OpenAI's chat parameters): those
are refused with a 400, so no client field can become a litellm setting. Other unknown fields
are provider-specific and passed on, as litellm does. litellm's exceptions are translated
here, once, into the error tree (through `providers.failures`).
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import inspect
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import litellm
import orjson

from kernel import tracing
from kernel.config import ModelEntry, is_ollama
from kernel.errors import (
    ForbiddenParameter,
    OverspillError,
    UpstreamError,
    UpstreamTimeout,
    too_deep,
)
from kernel.types import ChatRequest, ChatResponse, RequestContext
from providers.failures import classify_failure, error_message, parse_body
from providers.ollama import chat_fields

litellm.telemetry = False
litellm.suppress_debug_info = True

OPENAI_CHAT_PARAMS = frozenset(
    {
        "audio", "frequency_penalty", "function_call", "functions", "logit_bias", "logprobs",
        "max_completion_tokens", "max_tokens", "metadata", "modalities", "n",
        "parallel_tool_calls", "prediction", "presence_penalty", "prompt_cache_key",
        "reasoning_effort", "response_format", "safety_identifier", "seed", "service_tier",
        "stop", "store", "stream_options", "temperature", "tool_choice", "tools",
        "top_logprobs", "top_p", "user", "verbosity", "web_search_options", "thinking",
    }
)  # fmt: skip


LITELLM_SETTINGS = (
    (
        frozenset(litellm.all_litellm_params)
        | frozenset(inspect.signature(litellm.acompletion).parameters)
    )
    - OPENAI_CHAT_PARAMS
    - {"model", "messages", "stream", "kwargs"}
)
"""Names litellm reads as its own settings: a request may not set them."""

_EXCEPTION_PREFIX = re.compile(r"^(?:litellm\.\w+: )+")
_PROVIDER_PREFIX = re.compile(r"^\w+(?:Exception|Error) - ")


class LitellmProvider:
    """One deployment served through `litellm.acompletion`."""

    def __init__(self, entry: ModelEntry, *, drop_params: bool = False) -> None:
        params = entry.litellm_params
        self.name = params.provider
        self.settings: dict[str, Any] = {"model": params.model, **params.extras()}
        for key in ("api_base", "api_version", "timeout", "stream_timeout"):
            value = getattr(params, key)
            if value is not None:
                self.settings[key] = value
        if params.api_key is not None:
            self.settings["api_key"] = params.api_key.get_secret_value()
        if drop_params:
            self.settings.setdefault("drop_params", True)
        if is_ollama(params.model):
            self.settings["extra_body"] = chat_fields(entry)

    def kwargs(self, request: ChatRequest) -> dict[str, Any]:
        """The keyword arguments for litellm.acompletion."""
        kwargs: dict[str, Any] = {"messages": list(request.messages), "stream": request.stream}
        for key, value in request.params().items():
            if key in LITELLM_SETTINGS:
                raise ForbiddenParameter(
                    f"{key!r} is a litellm setting and cannot be set by a request; "
                    "deployment settings come from overspill's config.yaml only",
                    param=key,
                )
            kwargs[key] = value
        kwargs.update(self.settings)
        if tracing.tracer is not None:  # the upstream-call span's traceparent goes along
            kwargs["extra_headers"] = {
                **(self.settings.get("extra_headers") or {}),
                **tracing.tracer.headers(),
            }
        return kwargs

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        """Call litellm; streams are returned primed."""
        _writable(request)
        kwargs = self.kwargs(request)
        try:
            result = await litellm.acompletion(**kwargs)
        except Exception as exc:
            raise self.translate(exc) from exc
        if not request.stream:
            return ChatResponse(body=orjson.dumps(result.model_dump(exclude_none=True)))
        iterator = result.__aiter__()
        try:
            first = await iterator.__anext__()
        except StopAsyncIteration:
            raise UpstreamError(
                f"upstream {self.name} ended the stream without sending any event",
                provider=self.name,
            ) from None
        except Exception as exc:
            raise self.translate(exc) from exc
        return ChatResponse(stream=self._relay(first, iterator))

    async def aclose(self) -> None:
        """litellm keeps its own client pool; nothing to release per deployment."""

    async def _relay(self, first: Any, rest: AsyncIterator[Any]) -> AsyncIterator[bytes]:
        yield _event(first)
        try:
            async for chunk in rest:
                yield _event(chunk)
        except Exception as exc:
            raise self.translate(exc) from exc
        yield b"data: [DONE]\n\n"

    def translate(self, exc: BaseException) -> OverspillError:
        """A litellm (or transport) exception as an error of the tree."""
        if isinstance(exc, OverspillError):
            return exc
        if isinstance(exc, litellm.exceptions.Timeout | httpx.TimeoutException):
            return UpstreamTimeout(
                f"upstream {self.name} did not answer in time: {_message(exc, None)}",
                provider=self.name,
            )
        if isinstance(exc, litellm.exceptions.APIConnectionError | httpx.TransportError):
            return UpstreamError(
                f"cannot reach upstream {self.name}: {_message(exc, None)}", provider=self.name
            )
        status = getattr(exc, "status_code", None)
        body = _body(exc)
        return classify_failure(
            status=status if isinstance(status, int) else None,
            message=_message(exc, body),
            body=body,
            provider=getattr(exc, "llm_provider", None) or self.name,
            retry_after=_retry_after(exc),
        )


def _event(chunk: Any) -> bytes:
    return b"data: " + orjson.dumps(chunk.model_dump(exclude_none=True)) + b"\n\n"


def _message(exc: BaseException, body: object) -> str:
    """The provider's own words: litellm's `litellm.XError: FooException - ` prefixes removed."""
    if body is not None:
        found = error_message(body, "")
        if found:
            return found
    message = getattr(exc, "message", None)
    text = message if isinstance(message, str) and message else str(exc)
    return _PROVIDER_PREFIX.sub("", _EXCEPTION_PREFIX.sub("", text))


def _body(exc: BaseException) -> object:
    """The upstream's error body: given by the exception, or embedded in its message."""
    body = getattr(exc, "body", None)
    if body is not None:
        return body
    response = getattr(exc, "response", None)
    content = getattr(response, "content", None)
    if isinstance(content, bytes) and content:
        return parse_body(content)
    message = getattr(exc, "message", None)
    if isinstance(message, str):
        _, brace, tail = _PROVIDER_PREFIX.sub("", _EXCEPTION_PREFIX.sub("", message)).partition("{")
        if brace:
            parsed = parse_body((brace + tail).encode())
            if isinstance(parsed, dict):
                return parsed
    return None


def _retry_after(exc: BaseException) -> str | None:
    """Retry-After from the upstream's response headers, wherever litellm kept them."""
    response = getattr(exc, "response", None)
    for headers in (
        getattr(exc, "litellm_response_headers", None),
        getattr(exc, "headers", None),
        getattr(response, "headers", None),
    ):
        value = (
            headers.get("retry-after") if headers is not None and hasattr(headers, "get") else None
        )
        if value:
            return str(value)
    return None


def _writable(request: ChatRequest) -> None:
    """Refuse, as the client's error, a body nested deeper than it can be written again: litellm
    would fail on it in its own code and the failure would look like the upstream's (a 502)."""
    try:
        orjson.dumps(request.body)
    except orjson.JSONEncodeError as exc:
        raise too_deep("the request body") from exc
