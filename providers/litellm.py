"""litellm for every provider that does not speak OpenAI's wire format (the only litellm import).

Chat completions go through `litellm.acompletion`; embeddings and legacy completions through
`litellm.aembedding` and `litellm.atext_completion`, answered in OpenAI's shape.

Request parameters become litellm keyword arguments, except litellm's own settings (its list
of internal params and acompletion's named arguments, beyond OpenAI's chat parameters): those
are refused with a 400, so no client field can become a litellm setting. Other unknown fields
are provider-specific and passed on, as litellm does. litellm's exceptions are translated
here, once, into the error tree (through `providers.failures`).
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import array
import binascii
import functools
import inspect
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
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
    RouteNotServed,
    UpstreamBadResponse,
    UpstreamError,
    UpstreamTimeout,
    too_deep,
)
from kernel.types import ChatRequest, ChatResponse, RequestContext, RouteRequest
from providers.deadline import Deadline
from providers.failures import classify_failure, error_message, parse_body
from providers.guard import WATCH, Watch, guard_response
from providers.ollama import chat_fields
from providers.openai_params import OPENAI_CHAT_PARAMS
from providers.translation import unsupported_parameters

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
TEXT_EMBEDDERS = frozenset(
    {"cohere", "gemini", "vertex_ai", "bedrock", "ollama", "ollama_chat", "mistral", "voyage"}
)
"""Providers whose embeddings API takes text only (token ids are OpenAI's API's, and of the
servers that copy it: any other provider is sent what the client sent)."""
TEXT_COMPLETION_PROVIDERS = frozenset(
    {"text-completion-openai", "azure_text", "text-completion-codestral"}
)
"""Providers litellm sends a text completion as one (any prompt OpenAI's API takes); for every
other, litellm writes the prompt as a chat message."""

_EXCEPTION_PREFIX = re.compile(r"^(?:litellm\.\w+: )+")
_PROVIDER_PREFIX = re.compile(r"^(?:\w+(?:Exception|Error)(?: -|:) )+")
_HANDLE_WITH = re.compile(r"\.? Handle with `litellm\.\w+`\.?$")
_UNSUPPORTED = re.compile(r"does not support parameters: \[([^\]]*)\]")
"""litellm's UnsupportedParamsError naming the parameters (a Python list's repr)."""
_TLS_CONTEXT = re.compile(r"ssl:<ssl\.SSLContext object at 0x[0-9a-f]+>")
"""aiohttp's words for a TLS connection ("Cannot connect to host h:443 ssl:<ssl.SSLContext
object at 0x7f…>"): a memory address that tells the client nothing."""
_TRACEBACK = "\nTraceback (most recent call last):"
"""Where litellm appends a traceback to an error's message (its catch-all): never sent."""


def _dumped(result: Any) -> bytes:
    """A litellm answer object as JSON bytes."""
    return orjson.dumps(result.model_dump(exclude_none=True))


def _event(chunk: Any) -> bytes:
    """A litellm stream chunk as one SSE event."""
    return b"data: " + _dumped(chunk) + b"\n\n"


def _completion(result: Any) -> bytes:
    """litellm's text completion (or one chunk of its stream) as OpenAI's `text_completion`:
    each choice has its `text`, `logprobs` and `finish_reason` (null when none), and the
    zeros litellm writes as a stream chunk's usage are left out."""
    answer = result.model_dump(exclude_none=True)
    for choice in answer.get("choices") or ():
        if isinstance(choice, dict):
            choice.setdefault("text", "")
            choice.setdefault("logprobs", None)
            choice.setdefault("finish_reason", None)
    usage = answer.get("usage")
    if isinstance(usage, dict) and not any(usage.values()):
        del answer["usage"]
    return orjson.dumps(answer)


def _completion_event(chunk: Any) -> bytes:
    """One chunk of litellm's text completion stream as an SSE event."""
    return b"data: " + _completion(chunk) + b"\n\n"


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
        self.text_native = self.name in TEXT_COMPLETION_PROVIDERS or (
            self.name == "openai"
            and params.upstream_model not in litellm.open_ai_chat_completion_models
        )
        """litellm sends a text completion to a text completion API (for an `openai/` model
        it does not know as a chat model: vLLM's and others' `/v1/completions`)."""
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
        params = request.params()
        refuse_settings(params)
        kwargs.update(params)
        return self._with_settings(kwargs)

    def route_kwargs(self, request: RouteRequest) -> dict[str, Any]:
        """The keyword arguments for litellm.aembedding / atext_completion: the client's
        fields as they came (OpenAI's names are litellm's), the deployment's settings."""
        kwargs = {key: value for key, value in request.body.items() if key != "model"}
        refuse_settings(kwargs)
        kwargs.pop("stream", None)
        kwargs = self._with_settings(kwargs)
        if request.route == "embeddings":
            self._texts(request)
            kwargs.pop("encoding_format", None)  # written here, for every provider alike
            kwargs.pop("client", None)  # the guarded client speaks chat: litellm's own here
            kwargs.pop("extra_body", None)  # Ollama's chat fields (num_ctx, ...) are for chat
            kwargs.pop("stream_timeout", None)
            if self.name == "ollama_chat":  # litellm embeds through Ollama's `ollama/` route
                kwargs["model"] = "ollama/" + kwargs["model"].removeprefix("ollama_chat/")
        else:
            kwargs["stream"] = request.stream
            kwargs["prompt"] = self._prompt(request)
        return kwargs

    def _texts(self, request: RouteRequest) -> None:
        """Refuse token ids as embedding input for a provider whose API embeds only text
        (litellm fails on them in its own code, or passes them on to be refused)."""
        given = request.body.get("input")
        if self.name not in TEXT_EMBEDDERS or not isinstance(given, list):
            return
        if any(not isinstance(item, str) for item in given):
            raise RouteNotServed(
                f"model {request.model!r} ({self.name}) embeds text only: send 'input' as a "
                "string or an array of strings (token ids are for OpenAI's embeddings API)"
            )

    def _prompt(self, request: RouteRequest) -> Any:
        """A completion's prompt as litellm can send it: litellm turns a prompt into one chat
        message for every provider but OpenAI's text completion APIs, so more than one prompt
        (or token ids) would not be what the client asked; those are refused with a 400."""
        prompt = request.body.get("prompt")
        if self.text_native or isinstance(prompt, str):
            return prompt
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            return prompt[0]
        raise RouteNotServed(
            f"model {request.model!r} ({self.name}) takes one text prompt per request on "
            "/v1/completions: litellm sends it to the provider as one chat message. Send a "
            "string as 'prompt' (one request per prompt)"
        )

    def _with_settings(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """`kwargs` with the deployment's settings (which win) and the trace's headers."""
        kwargs.update(self.settings)
        if tracing.tracer is not None:  # the upstream-call span's traceparent goes along
            kwargs["extra_headers"] = {
                **(self.settings.get("extra_headers") or {}),
                **tracing.tracer.headers(),
            }
        return kwargs

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        """Call litellm within the deadline; streams are returned primed."""
        _writable(request.body)
        call = functools.partial(litellm.acompletion, **self.kwargs(request))
        return await self._call(call, request.stream, _dumped, guarded=True)

    async def send(self, request: RouteRequest, ctx: RequestContext) -> ChatResponse:
        """litellm's embedding or text completion call, answered in OpenAI's shape: what
        `complete` does for chat (deadline, primed stream, errors mapped here, once)."""
        _writable(request.body)
        kwargs = self.route_kwargs(request)
        if request.route == "embeddings":
            base64 = request.body.get("encoding_format") == "base64"
            answer = functools.partial(_embeddings, base64)
            return await self._call(functools.partial(litellm.aembedding, **kwargs), False, answer)
        call = functools.partial(litellm.atext_completion, **kwargs)
        return await self._call(call, request.stream, _completion, _completion_event, True)

    async def _call(
        self,
        call: Callable[[], Awaitable[Any]],
        stream: bool,
        answer: Callable[[Any], bytes],
        event: Callable[[Any], bytes] = _event,
        guarded: bool = False,
    ) -> ChatResponse:
        """`call` within the deadline; a JSON result written by `answer`, a stream primed and
        each of its chunks written by `event`. `guarded`: the call goes through the guarded
        HTTP client, which watches its bytes."""
        watch = None
        if guarded and self.end_markers is not None:
            watch = Watch(self.name, stream, self.max_bytes, self.end_markers)
        token = WATCH.set(watch)
        seconds = self.stream_timeout if stream else self.timeout
        try:
            with Deadline(seconds):
                result = await call()
                if not stream:
                    return ChatResponse(body=answer(result))
                upstream = _Counted.around(result) if guarded and watch is None else None
                iterator = result.__aiter__()
                first = await iterator.__anext__()
                if upstream is not None and upstream.ended and not upstream.events:
                    raise self._ended(watch, "without sending any event")  # litellm's own chunk
        except StopAsyncIteration:
            raise self._ended(watch, "without sending any event") from None
        except TimeoutError as exc:
            what = "stream's first event" if stream else "answer"
            raise self._timeout(seconds, what) from exc
        except Exception as exc:
            raise self.translate(exc, watch) from exc
        finally:
            WATCH.reset(token)
        if watch is not None and watch.error is not None:
            raise watch.error
        return ChatResponse(stream=self._relay(first, iterator, watch, event, upstream))

    async def aclose(self) -> None:
        """Close the guarded HTTP client (litellm's shared pool is litellm's)."""
        if self.http is not None:
            await self.http.client.aclose()

    async def _relay(
        self,
        first: Any,
        rest: AsyncIterator[Any],
        watch: Watch | None,
        event: Callable[[Any], bytes],
        upstream: _Counted | None,
    ) -> AsyncIterator[bytes]:
        """Each chunk as an SSE event; each gap between two bounded by stream_timeout."""
        yield event(first)
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
            yield event(chunk)
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
        own = None if _NOT_JSON in str(exc) else _litellms_own(exc)
        if own is not None and watch is not None and watch.status == 0 and not mid_stream:
            return unwritable(self.name, own)  # failed before an answer: nothing was sent
        if own is not None:  # no watch says whether it was writing or reading
            return UpstreamError(
                f"litellm failed on a request to {self.name} (not a connection error): "
                f"{_message(own, None)}",
                provider=self.name,
            )
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
        if isinstance(exc, litellm.exceptions.APIConnectionError | httpx.TransportError) or (
            status_of(exc) in (None, 500) and any(map(_a_transport_error, _links(exc)))
        ):  # litellm reports some providers' failed connections as its 500
            return UpstreamError(
                f"cannot reach upstream {self.name}: {_message(exc, None)}", provider=self.name
            )
        refused = refused_parameters(self.name, exc)
        if refused is not None:
            return refused
        body = _body(exc)
        return classify_failure(
            status=status_of(exc),
            message=_message(exc, body),
            body=body,
            provider=self.name,  # litellm names "openai" for any provider's text completion
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


def refuse_settings(params: Iterable[str]) -> None:
    """Refuse a request field that litellm would read as its own setting (a 400)."""
    for key in params:
        if key in LITELLM_SETTINGS:
            raise ForbiddenParameter(
                f"{key!r} is a litellm setting and cannot be set by a request; "
                "deployment settings come from overspill's config.yaml only",
                param=key,
            )


def _embeddings(base64: bool, result: Any) -> bytes:
    """litellm's embeddings answer as OpenAI's. litellm is always asked for floats (not every
    provider writes base64); with `base64`, each vector is written as OpenAI writes it then."""
    answer = result.model_dump(exclude_none=True)
    if base64:
        for item in answer.get("data") or ():
            vector = item.get("embedding") if isinstance(item, dict) else None
            if isinstance(vector, list):
                item["embedding"] = float32_base64(vector)
    return orjson.dumps(answer)


def float32_base64(vector: Sequence[float]) -> str:
    """A vector as OpenAI's `encoding_format: base64` writes it (float32, little-endian)."""
    values = array.array("f", vector)
    if sys.byteorder == "big":
        values.byteswap()
    return binascii.b2a_base64(values.tobytes(), newline=False).decode("ascii")


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
    before, ` Handle with `litellm.XError`.` and a traceback after, a TLS context's address."""
    text = _TLS_CONTEXT.sub("ssl:TLS", text.partition(_TRACEBACK)[0])
    text = _PROVIDER_PREFIX.sub("", _EXCEPTION_PREFIX.sub("", text))
    return _HANDLE_WITH.sub("", text.strip())


def refused_parameters(provider: str, exc: BaseException) -> OverspillError | None:
    """litellm's refusal of parameters the provider lacks, in the words overspill's own
    translations use (litellm's names its own settings, not overspill's config); None for
    any other exception."""
    found = _UNSUPPORTED.search(str(exc))
    if not isinstance(exc, litellm.exceptions.UnsupportedParamsError) or found is None:
        return None
    names = sorted(re.findall(r"'([^']*)'", found.group(1)))
    return unsupported_parameters(provider, names) if names else None


def unwritable(provider: str, exc: BaseException) -> OverspillError:
    """A request litellm's code failed to write in `provider`'s API (its own KeyError,
    TypeError or ValueError on the request's content): the client's 400, as litellm said
    why."""
    if isinstance(exc, KeyError) and exc.args:
        said = f"it needs a field {exc.args[0]!r} the request does not give"
    else:
        said = _message(exc, None)
        if isinstance(exc, TypeError | AttributeError):
            said = f"a field has another type than the API's ({said})"
    return classify_failure(
        status=400, message=f"the request cannot be written in {provider}'s API: {said}",
        provider=provider,
    )  # fmt: skip


def status_of(exc: BaseException) -> int | None:
    """The HTTP status litellm gives an exception, if any."""
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def _links(exc: BaseException) -> list[BaseException]:
    """The exceptions `exc` was raised from or while handling, nearest first (a few)."""
    found: list[BaseException] = []
    link = exc.__cause__ or exc.__context__
    while link is not None and len(found) < 16:
        found.append(link)
        link = link.__cause__ or link.__context__
    return found


def _a_transport_error(link: BaseException) -> bool:
    """A failure of the connection itself (the socket, TLS, the HTTP client's transport)."""
    return isinstance(link, OSError | TimeoutError | httpx.TransportError) or type(
        link
    ).__module__.startswith(("aiohttp", "httpcore", "httpx"))


def _litellms_own(exc: BaseException) -> BaseException | None:
    """The exception litellm's own code raised that litellm reports as a connection error
    (its catch-all wraps any exception in `APIConnectionError`); None when the failure is the
    connection's (a transport error in the chain) or litellm's alone."""
    if not isinstance(exc, litellm.exceptions.APIConnectionError):
        return None
    links = _links(exc)
    if any(map(_a_transport_error, links)):
        return None
    return next((link for link in links if not type(link).__module__.startswith("litellm")), None)


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


def _writable(body: Mapping[str, Any]) -> None:
    """Refuse, as the client's error, a body nested deeper than it can be written again: litellm
    would fail on it in its own code and the failure would look like the upstream's (a 502)."""
    try:
        orjson.dumps(body)
    except orjson.JSONEncodeError as exc:
        raise too_deep("the request body") from exc
