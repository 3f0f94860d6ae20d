"""litellm for every provider that does not speak OpenAI's wire format (the only litellm import).

Request parameters reach litellm by allow-list: OpenAI's documented chat parameters become
keyword arguments; anything else rides in `extra_body`, which litellm sends to the provider
without interpreting it, so no client field can become a litellm setting. litellm's exceptions
are translated here, once, into the error tree (through `providers.failures`).
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from collections.abc import AsyncIterator
from typing import Any

import httpx
import litellm
import orjson

from providers.failures import classify_failure, parse_body
from proxy.config import ModelEntry
from proxy.errors import OverspillError, UpstreamError, UpstreamTimeout
from proxy.types import ChatRequest, ChatResponse, RequestContext

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

    def kwargs(self, request: ChatRequest) -> dict[str, Any]:
        """The keyword arguments for litellm.acompletion."""
        kwargs: dict[str, Any] = {"messages": list(request.messages), "stream": request.stream}
        extra: dict[str, Any] = {}
        for key, value in request.params().items():
            if key in OPENAI_CHAT_PARAMS:
                kwargs[key] = value
            elif key != "stream":
                extra[key] = value
        if extra:
            kwargs["extra_body"] = extra
        kwargs.update(self.settings)
        return kwargs

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        """Call litellm; streams are returned primed."""
        try:
            result = await litellm.acompletion(**self.kwargs(request))
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
        if isinstance(exc, litellm.Timeout | httpx.TimeoutException):
            return UpstreamTimeout(
                f"upstream {self.name} did not answer in time: {_message(exc)}",
                provider=self.name,
            )
        if isinstance(exc, litellm.APIConnectionError | httpx.TransportError):
            return UpstreamError(
                f"cannot reach upstream {self.name}: {_message(exc)}", provider=self.name
            )
        status = getattr(exc, "status_code", None)
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None) or {}
        return classify_failure(
            status=status if isinstance(status, int) else None,
            message=_message(exc),
            body=_body(exc),
            provider=getattr(exc, "llm_provider", None) or self.name,
            retry_after=headers.get("retry-after") if hasattr(headers, "get") else None,
        )


def _event(chunk: Any) -> bytes:
    return b"data: " + orjson.dumps(chunk.model_dump(exclude_none=True)) + b"\n\n"


def _message(exc: BaseException) -> str:
    message = getattr(exc, "message", None)
    text = message if isinstance(message, str) and message else str(exc)
    for prefix in ("litellm.",):
        if text.startswith(prefix) and ": " in text:
            text = text.split(": ", 1)[1]
    return text


def _body(exc: BaseException) -> object:
    body = getattr(exc, "body", None)
    if body is not None:
        return body
    response = getattr(exc, "response", None)
    content = getattr(response, "content", None)
    if isinstance(content, bytes) and content:
        return parse_body(content)
    return None
