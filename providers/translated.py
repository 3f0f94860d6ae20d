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
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
from litellm.litellm_core_utils.get_llm_provider_logic import get_llm_provider
from litellm.llms.anthropic.chat.handler import ModelResponseIterator as AnthropicEvents
from litellm.llms.anthropic.chat.transformation import ANTHROPIC_TOOL_NAME_REVERSE_MAP_KEY
from litellm.llms.base_llm.chat.transformation import BaseConfig
from litellm.llms.openai.chat.gpt_transformation import OpenAIGPTConfig
from litellm.types.utils import LlmProviders, ModelResponse
from litellm.utils import ProviderConfigManager, get_optional_params

from kernel.config import DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT, ModelEntry
from kernel.errors import OverspillError, nested_too_deep, too_deep
from kernel.types import ChatRequest, ChatResponse, Provider, RequestContext, RouteRequest
from providers import anthropic
from providers.chunks import DONE
from providers.failures import classify_failure
from providers.litellm import (
    LitellmProvider,
    _message,
    refuse_settings,
    refused_parameters,
    unwritable,
)
from providers.transport import Reply, Upstream
from providers.wire import SETTINGS, StreamReader, WireProvider, Written


@dataclass(frozen=True)
class Spec:
    """What litellm's config for a provider leaves to its own handler: the URL, the events."""

    url: Callable[[ModelEntry], str] | None
    """The deployment's endpoint (its `api_base`, the provider's variables, the default);
    None: the config's own `get_complete_url` of the deployment's base."""
    events: Callable[[BaseConfig, bool, dict[str, Any]], Any]
    """(config, json_mode, litellm_params) → an object whose `chunk_parser(dict)` turns one
    event's JSON into a litellm stream chunk."""
    end: str
    """The `type` of the event a complete stream ends with (`[DONE]`: OpenAI's last line)."""
    text: Callable[[dict[str, Any]], str | None]
    """An event's text when the parser would make nothing else of it (most events of a
    stream): written without the parser's objects. None: the parser reads the event."""
    endpoint: Callable[[ModelEntry], tuple[str | None, str | None] | None]
    """The deployment's (api_base, api_key) as litellm would send them; None: they depend
    on what this path does not resolve (litellm.acompletion keeps the deployment)."""


def _anthropic_events(config: BaseConfig, json_mode: bool, litellm_params: dict[str, Any]) -> Any:
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


def _given(entry: ModelEntry) -> tuple[str | None, str | None]:
    """The deployment's own api_base and api_key (the provider's variables: its config's)."""
    params = entry.litellm_params
    return params.api_base, (params.api_key.get_secret_value() if params.api_key else None)


WIRES: dict[str, Spec] = {
    "anthropic": Spec(
        anthropic.messages_url,
        _anthropic_events,
        end="message_stop",
        text=_anthropic_text,
        endpoint=_given,
    ),
}
"""Providers served here by a translation of their own API (the OpenAI family: below)."""

OPENAI_FAMILY = frozenset(
    {
        "openai", "custom_openai", "hosted_vllm", "lm_studio", "llamafile", "groq", "deepseek",
        "together_ai", "xai", "fireworks_ai", "mistral", "openrouter", "deepinfra", "perplexity",
        "nvidia_nim", "cerebras", "sambanova", "nebius", "anyscale", "moonshot", "novita",
    }
)  # fmt: skip
"""Providers whose API is OpenAI's chat completions and whose litellm handler does no more
than its config (`OpenAIGPTConfig` or a subclass: the parameters, the headers, the body, the
answer and the stream chunks): litellm's `base_llm_http_handler` or its OpenAI SDK call with
that config. Not here: Azure (its URL and API versions), Databricks and Cohere (their own
auth or stream handling), and any provider whose handler signs or fetches tokens."""
OPENAI_BASE = "https://api.openai.com/v1"
"""OpenAI's endpoint when a deployment, OPENAI_BASE_URL and OPENAI_API_BASE name none."""


def _openai_text(event: dict[str, Any]) -> str | None:
    """A chunk's text when it carries nothing else (one choice, a `content` delta, no finish
    reason, no usage): litellm's parser would return it as the delta's content."""
    choices = event.get("choices")
    if not isinstance(choices, list) or len(choices) != 1 or event.get("usage") is not None:
        return None
    choice = choices[0]
    if not isinstance(choice, dict) or choice.get("finish_reason") is not None:
        return None
    delta = choice.get("delta")
    if not isinstance(delta, dict) or not set(delta) <= {"content", "role"}:
        return None
    text = delta.get("content")
    return text if isinstance(text, str) else None


def _openai_events(config: BaseConfig, json_mode: bool, litellm_params: dict[str, Any]) -> Any:
    return config.get_model_response_iterator(
        streaming_response=None,  # type: ignore[arg-type]  # events are fed to chunk_parser
        sync_stream=False,
        json_mode=json_mode,
    )


def _openai_endpoint(entry: ModelEntry) -> tuple[str | None, str | None] | None:
    """(api_base, api_key) as litellm resolves them for an OpenAI-family deployment: its own,
    else the provider's from litellm's `get_llm_provider` (its variables and default base),
    else OpenAI's variables for `openai`. A deployment that names its own `api_base` needs no
    key (a local server: sent without one, where litellm's call refuses to send). None when
    the base or a provider's key stays unknown: litellm knows every provider's variable
    names, so the deployment stays with litellm.acompletion."""
    own_base, key = _given(entry)
    _, _, found_key, found_base = get_llm_provider(
        entry.litellm_params.model, api_base=own_base, api_key=key
    )
    base, key = own_base or found_base, key or found_key
    if entry.litellm_params.provider == "openai":
        base = base or os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_BASE")
        base, key = base or OPENAI_BASE, key or os.environ.get("OPENAI_API_KEY")
    return (base, key) if base and (key or own_base) else None


def _writes_whole_calls(config: BaseConfig | None) -> bool:
    """Whether litellm's config for an OpenAI-family provider writes the whole request: no
    stream wrapper of its own, no asynchronous transformation, no request signing."""
    return (
        isinstance(config, OpenAIGPTConfig)
        and not config.has_custom_stream_wrapper
        and not config.uses_async_transform_request
        and type(config).sign_request is BaseConfig.sign_request
    )


OPENAI_WIRE = Spec(None, _openai_events, end=DONE, text=_openai_text, endpoint=_openai_endpoint)


@dataclass(frozen=True)
class Resolved:
    """A deployment litellm's config writes here: its spec, the config, its endpoint."""

    spec: Spec
    config: BaseConfig
    api_base: str | None
    api_key: str | None


def resolve(entry: ModelEntry) -> Resolved | None:
    """The translation of a deployment litellm's config writes here, or None (litellm's own
    call): a provider of `WIRES` or the OpenAI family, and no litellm setting beyond
    `SETTINGS` (an `organization`, which OpenAI's SDK sends, is one). Resolved once per
    deployment: the config, the base and the key."""
    params = entry.litellm_params
    if not set(params.extras()) <= SETTINGS:
        return None
    spec = WIRES.get(params.provider)
    if spec is None and params.provider not in OPENAI_FAMILY:
        return None
    config = ProviderConfigManager.get_provider_chat_config(
        model=params.upstream_model, provider=LlmProviders(params.provider)
    )
    if spec is None:
        if not _writes_whole_calls(config):
            return None
        spec = OPENAI_WIRE
    assert config is not None, f"litellm has no chat config for {params.provider}"
    endpoint = spec.endpoint(entry)
    if endpoint is None:
        return None
    return Resolved(spec, config, *endpoint)


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
    resolved = resolve(entry)
    if resolved is not None:
        return TranslatedProvider(
            entry,
            client,
            resolved,
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

    @property
    def model_call_details(self) -> dict[str, Any]:
        """A new dict each time: litellm stores an answer's headers in it, kept by no one."""
        return {}

    def post_call(self, *args: Any, **kwargs: Any) -> None:
        """litellm's hook after a call: overspill logs its own requests."""


_NO_LOGGING = _NoLogging()


class LitellmWire:
    """A provider's API as litellm's config for it writes and reads it (one deployment)."""

    expected = "a JSON answer"

    def __init__(
        self, entry: ModelEntry, drop_params: bool = False, resolved: Resolved | None = None
    ) -> None:
        params = entry.litellm_params
        self.entry = entry
        self.name = params.provider
        resolved = resolved or resolve(entry)
        assert resolved is not None, f"litellm's config does not write {self.name} here"
        self.spec = resolved.spec
        self.end_kind = resolved.spec.end
        self.model = params.upstream_model
        self.config = resolved.config
        self.api_base, self.api_key = resolved.api_base, resolved.api_key
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
        if self.spec.url is not None:
            url = self.spec.url(self.entry)
            return url, url
        return self._complete_url(False), self._complete_url(True)

    def _complete_url(self, stream: bool) -> str:
        """The config's endpoint for the deployment's base (what litellm's handler calls)."""
        return self.config.get_complete_url(
            api_base=self.api_base,
            api_key=self.api_key,
            model=self.model,
            optional_params={},
            litellm_params={},
            stream=stream,
        )

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
        except Exception as exc:  # orjson's JSONEncodeError is TypeError itself: told apart
            if nested_too_deep(exc):  # parsed (up to 1024 levels), cannot be written
                raise too_deep("the request body") from exc
            raise self._untranslatable(exc) from exc

    def translate_request(self, request: ChatRequest) -> Written:
        """(headers, body, state for the answer's translation) for one request."""
        body = _fresh_body(request)
        messages = body.pop("messages")
        body.pop("model", None)
        body.pop("stream", None)
        refuse_settings(body)
        # litellm's call reads `metadata` as its own (logging), never the provider's: OpenAI's
        # API defines it, so the OpenAI family sends it as given; other wires drop it as
        # litellm's call did
        metadata = body.pop("metadata", None)
        optional = self.mapped(body, request.stream)
        optional.pop("stream", None)
        json_mode = bool(optional.pop("json_mode", False))
        extra_body = optional.pop("extra_body", None)
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
        if extra_body:  # the body's own extra fields, as litellm's handler merges them
            data = {
                **data,
                **self.config.transform_extra_body(
                    extra_body=extra_body,
                    request=data,
                    model=self.model,
                    litellm_params=litellm_params,
                ),
            }
        if metadata is not None and self.spec is OPENAI_WIRE:
            data["metadata"] = metadata
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
        return _Events(self.spec, self.config, written.state)

    def _untranslatable(self, exc: Exception) -> OverspillError:
        """A request litellm refused to write in the provider's API (as litellm said why)."""
        if isinstance(exc, OverspillError):
            return exc
        refused = refused_parameters(self.name, exc)
        if refused is not None:
            return refused
        status = getattr(exc, "status_code", None)
        if not isinstance(status, int) or not 400 <= status < 500:
            return unwritable(self.name, exc)  # litellm's own ValueError/KeyError on the request
        return classify_failure(status=status, message=_message(exc, None), provider=self.name)


class TranslatedProvider(WireProvider):
    """One deployment: litellm translates, overspill sends, reads and relays."""

    def __init__(
        self,
        entry: ModelEntry,
        client: Upstream,
        resolved: Resolved | None = None,
        *,
        drop_params: bool = False,
        request_timeout: float = DEFAULT_TIMEOUT,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        self.translation = LitellmWire(entry, drop_params, resolved)
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

    def __init__(self, spec: Spec, config: BaseConfig, state: _Answer) -> None:
        self.parser = spec.events(config, state.json_mode, state.litellm_params)
        known = getattr(self.parser, "response_id", None)
        self.id: str | None = None
        """The stream's id: its events' (OpenAI's wire), else the parser's."""
        if isinstance(known, str):
            self.id = "chatcmpl-" + known.removeprefix("chatcmpl-")
        self.model: str | None = None
        self.finished = False
        """Never set here: the relay sees the end event itself."""
        self.text = spec.text
        self.json_mode = state.json_mode
        self.usage: Any = None

    def delta(self, event: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
        """A text delta written directly, any other event through litellm's parser."""
        parsed = event if isinstance(event, dict) else dict(event)
        if self.id is None and isinstance(parsed.get("id"), str):
            self.id = parsed["id"]
            model = parsed.get("model")
            self.model = model if isinstance(model, str) else None
        text = self.text(parsed) if not self.json_mode else None
        if text is not None:
            return ({"content": text} if text else None), None
        chunk = self.parser.chunk_parser(chunk=parsed)
        usage = getattr(chunk, "usage", None)  # a field only once a chunk carried it
        if usage is not None:
            self.usage = usage
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
