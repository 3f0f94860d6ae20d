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
from litellm.llms.custom_httpx.http_handler import AsyncHTTPHandler

from kernel import tracing
from kernel.config import (
    DEFAULT_MAX_RESPONSE_BYTES,
    DEFAULT_TIMEOUT,
    OPENAI_WIRE_PROVIDERS,
    ModelEntry,
    is_ollama,
)
from kernel.errors import (
    ForbiddenParameter,
    OverspillError,
    UpstreamBadResponse,
    UpstreamError,
    UpstreamTimeout,
    too_deep,
)
from kernel.types import ChatRequest, ChatResponse, RequestContext
from providers.deadline import Deadline
from providers.failures import classify_failure, error_message, parse_body
from providers.guard import WATCH, Watch, guard_response
from providers.ollama import chat_fields
from providers.openai_params import OPENAI_CHAT_PARAMS

litellm.telemetry = False
litellm.suppress_debug_info = True


LITELLM_SETTINGS = (
    (
        frozenset(litellm.all_litellm_params)
        | frozenset(inspect.signature(litellm.acompletion).parameters)
    )
    - OPENAI_CHAT_PARAMS
    - {"model", "messages", "stream", "kwargs"}
) | {"drop_params", "additional_drop_params"}  # litellm_settings / config only
"""Names litellm reads as its own settings: a request may not set them."""

GUARDED_PROVIDERS: dict[str, tuple[bytes, ...]] = {
    "anthropic": (b"event: message_delta", b"event: message_stop"),
    "ollama_chat": (b'"done":true', b'"done": true'),
}
"""Providers litellm calls through its own HTTP handler (which takes overspill's client with
the response guard), and the bytes a complete stream of theirs ends with."""
_NOT_JSON = "Unable to get json response"

_EXCEPTION_PREFIX = re.compile(r"^(?:litellm\.\w+: )+")
_PROVIDER_PREFIX = re.compile(r"^\w+(?:Exception|Error) - ")
_HANDLE_WITH = re.compile(r"\.? Handle with `litellm\.\w+`\.?$")


class LitellmProvider:
    """One deployment served through `litellm.acompletion`."""

    def __init__(
        self,
        entry: ModelEntry,
        *,
        drop_params: bool = False,
        request_timeout: float = DEFAULT_TIMEOUT,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        params = entry.litellm_params
        self.name = params.provider
        self.timeout = params.timeout or request_timeout
        self.stream_timeout = params.stream_timeout or self.timeout
        self.max_bytes = max_response_bytes
        # No hidden retries: litellm's and the provider SDK's own stay off unless config sets them.
        self.settings: dict[str, Any] = {"num_retries": 0, "max_retries": 0}
        self.settings.update({"model": params.model, **params.extras()})
        for key in ("api_base", "api_version"):
            value = getattr(params, key)
            if value is not None:
                self.settings[key] = value
        self.settings["timeout"] = self.timeout
        self.settings["stream_timeout"] = self.stream_timeout
        if params.api_key is not None:
            self.settings["api_key"] = params.api_key.get_secret_value()
        if drop_params:
            self.settings.setdefault("drop_params", True)
        if is_ollama(params.model):
            self.settings["extra_body"] = chat_fields(entry)
        self.end_markers = GUARDED_PROVIDERS.get(self.name)
        self.openai_wire = self.name in OPENAI_WIRE_PROVIDERS
        """The provider's own chunks are OpenAI's: a complete stream says its finish_reason."""
        self.http: AsyncHTTPHandler | None = None
        if self.end_markers is not None:
            self.http = AsyncHTTPHandler(
                timeout=self.timeout, event_hooks={"response": [guard_response]}
            )
            self.settings["client"] = self.http

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
        """Call litellm within the deadline; streams are returned primed."""
        _writable(request)
        kwargs = self.kwargs(request)
        watch = None
        if self.end_markers is not None:
            watch = Watch(self.name, request.stream, self.max_bytes, self.end_markers)
        token = WATCH.set(watch)
        seconds = self.stream_timeout if request.stream else self.timeout
        try:
            with Deadline(seconds):
                result = await litellm.acompletion(**kwargs)
                if not request.stream:
                    return ChatResponse(body=orjson.dumps(result.model_dump(exclude_none=True)))
                upstream = _Counted.around(result) if watch is None else None
                iterator = result.__aiter__()
                first = await iterator.__anext__()
                if upstream is not None and upstream.ended and not upstream.events:
                    raise self._ended(watch, "without sending any event")  # litellm's own chunk
        except StopAsyncIteration:
            raise self._ended(watch, "without sending any event") from None
        except TimeoutError as exc:
            what = "stream's first event" if request.stream else "answer"
            raise self._timeout(seconds, what) from exc
        except Exception as exc:
            raise self.translate(exc, watch) from exc
        finally:
            WATCH.reset(token)
        if watch is not None and watch.error is not None:
            raise watch.error
        return ChatResponse(stream=self._relay(first, iterator, watch, upstream))

    async def aclose(self) -> None:
        """Close the guarded HTTP client (litellm's shared pool is litellm's)."""
        if self.http is not None:
            await self.http.client.aclose()

    async def _relay(
        self, first: Any, rest: AsyncIterator[Any], watch: Watch | None, upstream: _Counted | None
    ) -> AsyncIterator[bytes]:
        """Each chunk as an SSE event; each gap between two bounded by stream_timeout."""
        yield _event(first)
        while True:
            try:
                with Deadline(self.stream_timeout):
                    chunk = await rest.__anext__()
            except StopAsyncIteration:
                break
            except TimeoutError as exc:
                raise self._timeout(self.stream_timeout, "next event") from exc
            except Exception as exc:
                raise self.translate(exc, watch, mid_stream=True) from exc
            yield _event(chunk)
        if watch is not None:
            if watch.error is not None:
                raise watch.error
            if not watch.finished():
                raise self._ended(watch, "before its end event")
        elif upstream is not None and self.openai_wire and not upstream.finished:
            raise self._ended(watch, "before its end event (no finish_reason)")
        yield b"data: [DONE]\n\n"

    def _ended(self, watch: Watch | None, how: str) -> UpstreamError:
        seen = ""
        if watch is not None:
            ctype = watch.content_type or "(none)"
            seen = f" (HTTP {watch.status}, content-type {ctype}, {watch.size} bytes)"
        return UpstreamBadResponse(
            f"upstream {self.name} ended the stream {how}{seen}",
            provider=self.name,
            upstream_status=watch.status if watch is not None else None,
        )

    def _timeout(self, seconds: float, what: str) -> UpstreamTimeout:
        return UpstreamTimeout(
            f"upstream {self.name} did not send its {what} within {seconds:g} s "
            "(litellm_params.timeout / stream_timeout, else general_settings.request_timeout)",
            provider=self.name,
        )

    def translate(
        self, exc: BaseException, watch: Watch | None = None, *, mid_stream: bool = False
    ) -> OverspillError:
        """A litellm (or transport) exception as an error of the tree."""
        if isinstance(exc, OverspillError):
            return exc
        if watch is not None and watch.error is not None:
            return watch.error  # the guard's finding, whatever litellm made of it
        if watch is not None and watch.status == 0 and _transport_like(exc):
            return UpstreamError(
                f"cannot reach upstream {self.name}: the connection was refused, closed or reset "
                f"before an answer{_detail(exc)}",
                provider=self.name,
            )
        if watch is not None and mid_stream and _transport_like(exc):
            return UpstreamError(
                f"upstream {self.name} broke the stream: the connection was closed or reset"
                f"{_detail(exc)}",
                provider=self.name,
            )
        if _NOT_JSON in str(exc):
            seen = ""
            if watch is not None:
                ctype = watch.content_type or "(none)"
                seen = f": HTTP {watch.status}, content-type {ctype}, {watch.size} bytes"
            return UpstreamBadResponse(
                f"upstream {self.name} answered with something that is not the API's response "
                f"(not a JSON answer){seen}. Check the model's api_base and that the server "
                "there speaks the API",
                provider=self.name,
                upstream_status=watch.status if watch is not None else None,
            )
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


class _Counted:
    """The provider's own stream under litellm's wrapper, counting what it yields: a 200
    stream that ends before any event (llama-cpp-python's server answers an overflowing
    stream so) makes litellm's wrapper yield a final chunk of its own, which must not pass
    for the upstream's answer, and an OpenAI-wire stream cut before a chunk said its
    finish_reason ends without an error from litellm. Used where no response guard watches
    the bytes."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._iterator: Any = None
        self.events = 0
        self.ended = False
        self.finished = False
        """A chunk said why the answer ended (an OpenAI chunk's `finish_reason`)."""

    @classmethod
    def around(cls, result: Any) -> _Counted | None:
        """Count `result`'s provider stream (None: litellm fetches it later; not counted)."""
        inner = getattr(result, "completion_stream", None)
        if inner is None or not hasattr(inner, "__aiter__"):
            return None
        counted = cls(inner)
        result.completion_stream = counted
        return counted

    def __aiter__(self) -> _Counted:
        return self

    async def __anext__(self) -> Any:
        if self._iterator is None:
            self._iterator = self._inner.__aiter__()
        try:
            item = await self._iterator.__anext__()
        except StopAsyncIteration:
            self.ended = True
            raise
        self.events += 1
        for choice in getattr(item, "choices", None) or ():
            if getattr(choice, "finish_reason", None):
                self.finished = True
        return item

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


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
    return _bare(text)


def _bare(text: str) -> str:
    """litellm's words around the provider's removed: `litellm.XError: FooException - `
    before, ` Handle with `litellm.XError`.` after."""
    text = _PROVIDER_PREFIX.sub("", _EXCEPTION_PREFIX.sub("", text))
    return _HANDLE_WITH.sub("", text.strip())


def _transport_like(exc: BaseException) -> bool:
    """A failure of the connection, as litellm reports it (no upstream status of its own)."""
    if isinstance(exc, litellm.exceptions.MidStreamFallbackError):  # what broke the stream
        original = exc.original_exception
        return original is not None and _transport_like(original)
    if isinstance(exc, litellm.exceptions.APIConnectionError | httpx.TransportError):
        return True
    status = getattr(exc, "status_code", None)
    return status == 500 and not _bare(str(getattr(exc, "message", "") or ""))


def _detail(exc: BaseException) -> str:
    """`: what litellm said`, when it said anything."""
    said = _bare(str(getattr(exc, "message", "") or exc))
    return f" ({said[:300]})" if said else ""


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
        _, brace, tail = _bare(message).partition("{")
        if brace:
            parsed = parse_body((brace + tail.removesuffix("'")).encode())
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
