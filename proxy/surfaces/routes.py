"""`/v1/embeddings` and `/v1/completions`: OpenAI's routes that are not conversations.

Their bodies are checked in OpenAI's shape (what each field may hold, the connection fields
refused), and then forwarded as they came to a deployment of `model` by the router: the
client's own bytes to an upstream that speaks OpenAI's wire, litellm's embedding and text
completion calls for the others. No layer runs: there is no conversation to keep. Fields
overspill does not know are forwarded, as on chat completions; errors are OpenAI's shape.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.responses import Response

from kernel.errors import ContextWindowExceeded, InvalidChatRequest, OverspillError
from kernel.types import ChatResponse, RequestContext, RouteRequest
from proxy.http import check_forbidden, field_problem, json_object, model_of
from proxy.responses import error_response, sse_error_event

if TYPE_CHECKING:
    from proxy.system import System

Check = tuple[Callable[[Any], bool], str]
"""A field's test and what it expects, as a 400 says it."""


def _integer(least: int) -> Check:
    def test(value: Any) -> bool:
        return type(value) is int and value >= least

    expected = "a positive integer" if least == 1 else f"an integer of {least} or more"
    return test, expected


def _number(value: Any) -> bool:
    return type(value) in (int, float)


def _strings(value: Any) -> bool:
    return isinstance(value, str) or (
        isinstance(value, list) and all(type(item) is str for item in value)
    )


_BOOLEAN: Check = (lambda value: type(value) is bool, "true or false")
_STRING: Check = (lambda value: type(value) is str, "a string")
_OBJECT: Check = (lambda value: type(value) is dict, "an object")
_NUMBER: Check = (_number, "a number")

EMBEDDINGS_FIELDS: Mapping[str, Check] = {
    "encoding_format": (lambda value: value in ("float", "base64"), '"float" or "base64"'),
    "dimensions": _integer(1),
    "user": _STRING,
}
"""OpenAI's optional embeddings fields overspill checks (null is allowed for each)."""

COMPLETIONS_FIELDS: Mapping[str, Check] = {
    "max_tokens": _integer(0),
    "stream": _BOOLEAN,
    "stream_options": _OBJECT,
    "suffix": _STRING,
    "echo": _BOOLEAN,
    "logprobs": _integer(0),
    "n": _integer(1),
    "best_of": _integer(1),
    "stop": (_strings, "a string or an array of strings"),
    "temperature": _NUMBER,
    "top_p": _NUMBER,
    "presence_penalty": _NUMBER,
    "frequency_penalty": _NUMBER,
    "logit_bias": _OBJECT,
    "seed": (lambda value: type(value) is int, "an integer"),
    "user": _STRING,
}
"""OpenAI's optional legacy completions fields overspill checks (null is allowed for each)."""

TEXTS = "a string, an array of strings, an array of token ids, or an array of token id arrays"


def parse_route_request(route: str, raw: bytes) -> RouteRequest:
    """Validate an embeddings or completions body; raises InvalidChatRequest naming the field."""
    body = json_object(raw)
    model = model_of(body)
    text_field, fields = ("input", EMBEDDINGS_FIELDS)
    if route == "completions":
        text_field, fields = ("prompt", COMPLETIONS_FIELDS)
    check_texts(text_field, body.get(text_field))
    for name, (test, expected) in fields.items():
        value = body.get(name)
        if value is not None and not test(value):
            raise InvalidChatRequest(field_problem(name, value, expected), param=name)
    stream = body.get("stream") is True
    if route == "embeddings" and stream:
        raise InvalidChatRequest(
            "'stream' cannot be true on /v1/embeddings: embeddings are answered whole",
            param="stream",
        )
    if stream and isinstance(options := body.get("stream_options"), dict):
        usage = options.get("include_usage")
        if usage is not None and type(usage) is not bool:
            name = "stream_options.include_usage"
            raise InvalidChatRequest(field_problem(name, usage, "true or false"), param=name)
    check_forbidden(body)
    return RouteRequest(route=route, model=model, stream=stream, body=body, raw=raw)


def check_texts(name: str, value: Any) -> None:
    """`input` / `prompt`: a string, or a non-empty array of strings, of token ids, or of
    non-empty token id arrays (all items of one kind)."""
    if type(value) is str:
        return
    if not isinstance(value, list) or not value:
        expected = TEXTS if value != [] else TEXTS + " (not empty)"
        raise InvalidChatRequest(field_problem(name, value, expected), param=name)
    first = value[0]
    if type(first) is str:
        kind, test = "a string", _is_string
    elif _is_token(first):
        kind, test = "a token id (an integer of 0 or more)", _is_token
    else:
        kind, test = "a non-empty array of token ids", _is_tokens
    for index, item in enumerate(value):
        if not test(item):
            where = f"{name}[{index}]"
            if test is _is_tokens and type(item) is list and item:  # the id in it that is not
                at, bad = next((at, t) for at, t in enumerate(item) if not _is_token(t))
                token = "a token id (an integer of 0 or more)"
                raise InvalidChatRequest(field_problem(f"{where}[{at}]", bad, token), param=name)
            like = "" if index == 0 else " like the items before it"
            raise InvalidChatRequest(field_problem(where, item, kind + like), param=name)


def _is_string(value: Any) -> bool:
    return type(value) is str


def _is_token(value: Any) -> bool:
    return type(value) is int and value >= 0


def _is_tokens(value: Any) -> bool:
    return type(value) is list and bool(value) and all(_is_token(item) for item in value)


@dataclass(frozen=True, slots=True)
class RouteTurn:
    """An embeddings or completions request: the router forwards it to the model's deployment."""

    request: RouteRequest

    @property
    def model(self) -> str:
        """The model the client asked for."""
        return self.request.model

    @property
    def stream(self) -> bool:
        """Whether the client asked for a stream (completions only)."""
        return self.request.stream

    async def run(self, system: System, ctx: RequestContext) -> ChatResponse:
        """The deployment's answer, in OpenAI's wire; an overflow names the prompt's field."""
        try:
            return await system.router.send(self.request, ctx)
        except ContextWindowExceeded as exc:
            exc.param = "prompt" if self.request.route == "completions" else "input"
            raise

    async def answer(self, response: ChatResponse, ctx: RequestContext) -> ChatResponse:
        """Already in the client's wire."""
        return response

    def stream_error(self, error: OverspillError) -> bytes:
        """OpenAI's error body as one SSE event."""
        return sse_error_event(error)


class RouteSurface:
    """One of OpenAI's routes that are not conversations: `embeddings` or `completions`."""

    def __init__(self, route: str) -> None:
        self.name = route
        self.route = route

    async def open(
        self, raw: bytes, headers: Mapping[str, str], ctx: RequestContext, system: System
    ) -> tuple[RouteTurn, RequestContext]:
        """Validate the body; nothing else comes off the request (no conversation)."""
        return RouteTurn(parse_route_request(self.route, raw)), ctx

    def error(self, error: OverspillError, ctx: RequestContext) -> Response:
        """OpenAI's error shape."""
        return error_response(error, ctx)
