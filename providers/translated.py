"""litellm for translation only: overspill's own transport, pooling and stream relay.

`litellm.acompletion` costs milliseconds of CPU per request beyond the provider's wire format:
its logging object, a cost calculation per answer, model-map lookups, and a stream wrapper
that builds several pydantic objects per event. For a provider whose translation litellm
keeps in a config object (`ProviderConfigManager.get_provider_chat_config`), this provider
uses only that: the OpenAI parameters mapped (`get_optional_params`, which also applies
`drop_params`), the headers (`validate_environment`), the body (`transform_request`), the
answer (`transform_response`), and each stream event (the provider's chunk parser): a
`providers.wire.Wire` (`LitellmWire`) like overspill's own translations, sent by the same
`WireProvider`. The HTTP call is the app's shared client (one pool with the byte
passthrough), the stream is relayed event by event with the same guard as the passthrough
(whole events, a cut stream is an error event, not a silent end), and failures go through
`providers.failures` once.

Providers with no entry in `WIRES` (or a deployment with litellm settings this path does not
apply) keep `LitellmProvider`: `build_provider` chooses. An Anthropic deployment is mostly
served by overspill's own translation (`providers/anthropic.py`, no litellm); this path takes
the requests that translation leaves to litellm (`response_format`, thinking, documents, ...;
the road is chosen by `providers.roads.choose`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
from litellm.llms.anthropic.chat.handler import ModelResponseIterator as AnthropicEvents
from litellm.llms.anthropic.chat.transformation import ANTHROPIC_TOOL_NAME_REVERSE_MAP_KEY
from litellm.types.utils import LlmProviders, ModelResponse
from litellm.utils import ProviderConfigManager, get_optional_params

from kernel.config import DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT, ModelEntry
from kernel.errors import OverspillError, too_deep
from kernel.types import ChatRequest, ChatResponse, Provider, RequestContext, RouteRequest
from providers import anthropic
from providers.failures import classify_failure
from providers.litellm import LitellmProvider, _message, refuse_settings
from providers.transport import Reply, Upstream
from providers.wire import SETTINGS, StreamReader, WireProvider, Written


@dataclass(frozen=True)
class Spec:
    """What litellm's config for a provider leaves to its own handler: the URL, the events."""

    url: Callable[[ModelEntry], str]
    """The deployment's endpoint (its `api_base`, the provider's variables, the default)."""
    events: Callable[[bool, dict[str, Any]], Any]
    """(json_mode, litellm_params) → an object whose `chunk_parser(dict)` turns one event's
    JSON into a litellm stream chunk."""
    end: str
    """The `type` of the event a complete stream ends with."""
    text: Callable[[dict[str, Any]], str | None]
    """An event's text when the parser would make nothing else of it (most events of a
    stream): written without the parser's objects. None: the parser reads the event."""


def _anthropic_events(json_mode: bool, litellm_params: dict[str, Any]) -> Any:
    return AnthropicEvents(
        streaming_response=None,
        sync_stream=False,
        json_mode=json_mode,
        tool_name_reverse_map=litellm_params.get(ANTHROPIC_TOOL_NAME_REVERSE_MAP_KEY),
    )


def _anthropic_text(event: dict[str, Any]) -> str | None:
    """A `text_delta`'s text: litellm's parser returns it as the chunk's content and changes
    none of its own state for it (`ModelResponseIterator._content_block_delta_helper`)."""
    if event.get("type") != "content_block_delta":
        return None
    delta = event.get("delta")
    if not isinstance(delta, dict) or delta.get("type") != "text_delta":
        return None
    text = delta.get("text")
    return text if isinstance(text, str) else None


WIRES: dict[str, Spec] = {
    "anthropic": Spec(
        anthropic.messages_url,
        _anthropic_events,
        end="message_stop",
        text=_anthropic_text,
    ),
}
"""Providers served here; every other one goes through litellm.acompletion."""

_MEMO_KEY_BYTES = 2048
_MEMO_ENTRIES = 256
"""The parameter mappings one deployment remembers (small parameter sets only)."""


def build_provider(
    entry: ModelEntry,
    client: Upstream,
    *,
    drop_params: bool = False,
    request_timeout: float = DEFAULT_TIMEOUT,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
) -> Provider:
    """The translated provider when litellm's config covers the deployment, else litellm's."""
    params = entry.litellm_params
    if params.provider in WIRES and set(params.extras()) <= SETTINGS:
        return TranslatedProvider(
            entry,
            client,
            drop_params=drop_params,
            request_timeout=request_timeout,
            max_response_bytes=max_response_bytes,
        )
    return LitellmProvider(
        entry,
        drop_params=drop_params,
        request_timeout=request_timeout,
        max_response_bytes=max_response_bytes,
    )


class _NoLogging:
    """What litellm's transformations call on its logging object: nothing is logged here."""

    model_call_details: dict[str, Any] = {}  # noqa: RUF012  # litellm reads it, never writes

    def post_call(self, *args: Any, **kwargs: Any) -> None:
        """litellm's hook after a call: overspill logs its own requests."""


_NO_LOGGING = _NoLogging()


class LitellmWire:
    """A provider's API as litellm's config for it writes and reads it (one deployment)."""

    expected = "a JSON answer"

    def __init__(self, entry: ModelEntry, drop_params: bool = False) -> None:
        params = entry.litellm_params
        self.entry = entry
        self.name = params.provider
        self.spec = WIRES[self.name]
        self.end_kind = self.spec.end
        self.model = params.upstream_model
        config = ProviderConfigManager.get_provider_chat_config(
            model=self.model, provider=LlmProviders(self.name)
        )
        assert config is not None, f"litellm has no chat config for {self.name}"
        self.config = config
        self.api_base = params.api_base
        self.api_key = params.api_key.get_secret_value() if params.api_key is not None else None
        self.drop_params = drop_params or None
        self.memo: dict[bytes, bytes] = {}
        """Parameters (JSON) → litellm's mapping of them (JSON); see `mapped`."""
        extra_headers = params.extras().get("extra_headers")
        self.extra_headers = (
            {str(k): str(v) for k, v in extra_headers.items()}
            if isinstance(extra_headers, dict)
            else {}
        )

    def urls(self) -> tuple[str, str]:
        url = self.spec.url(self.entry)
        return url, url

    def leaves(self, request: ChatRequest) -> str | None:
        """Nothing: litellm writes what litellm writes (and says why it cannot)."""
        return None

    def native(self, request: ChatRequest) -> Written | None:
        """Always written by litellm's translation."""
        return None

    def write(self, request: ChatRequest) -> Written:
        """The request in the provider's API, as litellm writes it; what litellm refuses to
        write is a 400 that says why, in litellm's words."""
        try:
            return self.translate_request(request)
        except Exception as exc:
            raise self._untranslatable(exc) from exc

    def translate_request(self, request: ChatRequest) -> Written:
        """(headers, body, state for the answer's translation) for one request."""
        body = _fresh_body(request)
        messages = body.pop("messages")
        body.pop("model", None)
        body.pop("stream", None)
        refuse_settings(body)
        optional = self.mapped(body, request.stream)
        optional.pop("stream", None)
        json_mode = bool(optional.pop("json_mode", False))
        litellm_params: dict[str, Any] = {"api_base": self.api_base}
        headers = self.config.validate_environment(
            headers=dict(self.extra_headers),
            model=self.model,
            messages=messages,
            optional_params=optional,
            litellm_params=litellm_params,
            api_key=self.api_key,
            api_base=self.api_base,
        )
        data = self.config.transform_request(
            model=self.model,
            messages=messages,
            optional_params=optional,
            litellm_params=litellm_params,
            headers=headers,
        )
        if request.stream:
            data["stream"] = True
        headers["accept-encoding"] = "identity"
        state = _Answer(messages, optional, litellm_params, data, json_mode)
        return Written(orjson.dumps(data), headers, state)

    def mapped(self, params: dict[str, Any], stream: bool) -> dict[str, Any]:
        """The request's parameters in the provider's terms (litellm's `get_optional_params`,
        `drop_params` applied). They depend on the parameters and the model only, not on the
        messages, and most requests of a deployment repeat the same few: each small set is
        mapped once (a bounded memo of the results' JSON, read back as new objects)."""
        key = orjson.dumps([params, stream], option=orjson.OPT_SORT_KEYS)
        known = self.memo.get(key)
        if known is not None:
            mapped: dict[str, Any] = orjson.loads(known)
            return mapped
        mapped = get_optional_params(
            model=self.model,
            custom_llm_provider=self.name,
            drop_params=self.drop_params,
            stream=stream,
            **params,
        )
        if len(key) <= _MEMO_KEY_BYTES and len(self.memo) < _MEMO_ENTRIES:
            with contextlib.suppress(orjson.JSONEncodeError):  # not JSON: mapped each time
                self.memo[key] = orjson.dumps(mapped)
        return mapped

    def answer(self, content: bytes, written: Written, reply: Reply) -> bytes:
        """An upstream JSON answer as a chat.completion's bytes."""
        state: _Answer = written.state
        headers = reply.headers_starting(b"")
        raw = httpx.Response(reply.status, headers=headers, content=content)  # litellm's type
        try:
            result = self.config.transform_response(
                model=self.model,
                raw_response=raw,
                model_response=ModelResponse(),
                logging_obj=_NO_LOGGING,  # type: ignore[arg-type]  # what it calls, and no more
                request_data=state.data,
                messages=state.messages,
                optional_params=state.optional,
                litellm_params=state.litellm_params,
                encoding=None,
                api_key=self.api_key,
                json_mode=state.json_mode,
            )
        except Exception as exc:  # litellm's parse of a body that is not the API's answer
            raise ValueError(f"litellm could not read it: {type(exc).__name__}") from exc
        return orjson.dumps(_plain(result))

    def reader(self, written: Written) -> StreamReader:
        return _Events(self.spec, written.state)

    def _untranslatable(self, exc: Exception) -> OverspillError:
        """A request litellm refused to write in the provider's API (as litellm said why)."""
        if isinstance(exc, OverspillError):
            return exc
        status = getattr(exc, "status_code", None)
        said = _message(exc, None)
        if not isinstance(status, int) or not 400 <= status < 500:
            status = 400  # litellm's own ValueError/KeyError on the request's content
            said = f"the request cannot be written in {self.name}'s API: {said}"
        return classify_failure(status=status, message=said, provider=self.name)


class TranslatedProvider(WireProvider):
    """One deployment: litellm translates, overspill sends, reads and relays."""

    def __init__(
        self,
        entry: ModelEntry,
        client: Upstream,
        *,
        drop_params: bool = False,
        request_timeout: float = DEFAULT_TIMEOUT,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        self.translation = LitellmWire(entry, drop_params)
        super().__init__(
            entry,
            client,
            self.translation,
            request_timeout=request_timeout,
            max_response_bytes=max_response_bytes,
        )
        self.drop_params = drop_params
        self.limits = (request_timeout, max_response_bytes)
        self.routes: LitellmProvider | None = None
        """litellm's own calls, for embeddings and legacy completions (built on first use)."""

    async def aclose(self) -> None:
        """The shared client is closed by its owner (the app); litellm's calls' own client
        by them."""
        if self.routes is not None:
            await self.routes.aclose()

    async def send(self, request: RouteRequest, ctx: RequestContext) -> ChatResponse:
        """Embeddings and legacy completions: litellm's own calls (`LitellmProvider.send`),
        which have no translation config to borrow."""
        if self.routes is None:
            timeout, limit = self.limits
            self.routes = LitellmProvider(
                self.entry,
                drop_params=self.drop_params,
                request_timeout=timeout,
                max_response_bytes=limit,
            )
        return await self.routes.send(request, ctx)


@dataclass
class _Answer:
    """What translating the answer needs from translating the request."""

    messages: list[Any]
    optional: dict[str, Any]
    litellm_params: dict[str, Any]
    data: dict[str, Any]
    json_mode: bool


class _Events:
    """One stream's events, read by litellm's parser (a plain text delta without it)."""

    def __init__(self, spec: Spec, state: _Answer) -> None:
        self.parser = spec.events(state.json_mode, state.litellm_params)
        self.id: str | None = "chatcmpl-" + self.parser.response_id.removeprefix("chatcmpl-")
        self.model: str | None = None
        self.finished = False
        """Never set here: the relay sees the end event itself."""
        self.text = spec.text
        self.json_mode = state.json_mode
        self.usage: Any = None

    def delta(self, event: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
        """A text delta written directly, any other event through litellm's parser."""
        parsed = event if isinstance(event, dict) else dict(event)
        text = self.text(parsed) if not self.json_mode else None
        if text is not None:
            return ({"content": text} if text else None), None
        chunk = self.parser.chunk_parser(chunk=parsed)
        if chunk.usage is not None:
            self.usage = chunk.usage
        choice = chunk.choices[0] if chunk.choices else None
        if choice is None:
            return None, None
        delta: dict[str, Any] = {}
        source = choice.delta
        for key in ("content", "reasoning_content"):
            value = getattr(source, key, None)
            if value:
                delta[key] = value
        for key in ("tool_calls", "thinking_blocks", "provider_specific_fields"):
            value = getattr(source, key, None)
            if value:
                delta[key] = _plain(value)
        finish = choice.finish_reason or None
        if not delta and finish is None:
            return None, None
        return delta, finish

    def openai_usage(self) -> dict[str, Any] | None:
        """litellm's last usage object, as plain JSON."""
        return None if self.usage is None else dict(_plain(self.usage))


def _plain(value: Any) -> Any:
    """litellm's pydantic objects (or lists of them) as plain JSON values."""
    if isinstance(value, list):
        return [_plain(item) for item in value]
    dump = getattr(value, "model_dump", None)
    return dump(exclude_none=True) if dump is not None else value


def _fresh_body(request: ChatRequest) -> dict[str, Any]:
    """The request's body as new objects litellm may change in place (it does: Anthropic's
    system messages are moved out of the list): one parse of the client's bytes when they
    still apply, else one write and parse."""
    try:
        raw = request.raw if request.raw is not None else orjson.dumps(request.upstream_body(""))
    except orjson.JSONEncodeError as exc:  # parsed (up to 1024 levels), cannot be written
        raise too_deep("the request body") from exc
    body = orjson.loads(raw)
    assert isinstance(body, dict)
    return body
