"""The edge: request bytes → ChatRequest, the client's identity → RequestContext, auth → tenant.

Everything only overspill reads is taken off the request here and resolved once into typed
context fields: the conversation id (`X-Conversation-Id`, else `metadata.conversation_id`,
which is then not forwarded), the skip flag (`X-Overspill-Skip-History`, else
`overspill.skip_history`), and the `overspill` / `documents` extensions.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
from collections.abc import Mapping
from typing import Any

import orjson

from kernel.conversation import given_id
from kernel.errors import ForbiddenParameter, InvalidChatRequest
from kernel.spending import Spend
from kernel.types import ChatRequest, RequestContext

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
EXTENSION_KEYS = {"overspill": (dict, "an object of overspill options"),
                  "documents": (list, "an array of documents")}  # fmt: skip
"""overspill's request extensions: kept for the layers, never sent upstream."""

# Body fields that would let a client choose where overspill sends traffic or which credentials
# it uses (litellm reads them as connection settings). Only config.yaml may set these.
FORBIDDEN_FIELDS = frozenset(
    {
        "api_base", "base_url", "api_key", "api_version", "api_type", "custom_llm_provider",
        "organization", "extra_headers", "headers", "user_config", "deployment_id",
        "model_list", "client_id", "client_secret", "tenant_id", "azure_ad_token",
        "azure_ad_token_provider", "azure_username", "azure_password", "workspace_id",
        "s3_endpoint_url", "sagemaker_base_url", "deployment_url", "mock_response",
        "mock_tool_calls", "mock_timeout", "input_cost_per_token", "output_cost_per_token",
        "callbacks", "success_callback", "failure_callback", "logger_fn", "proxy_server_request",
        "rust", "region_name", "project_id", "credentials",
    }
)  # fmt: skip
FORBIDDEN_PREFIXES = ("aws_", "vertex_", "azure_", "litellm_", "watsonx_", "anthropic_", "oci_")
# Containers whose keys litellm spreads into the call: checked with the same rules.
NESTED_CHECKED = ("extra_body", "metadata")
CONVERSATION_HEADER = "x-conversation-id"
SKIP_HEADER = "x-overspill-skip-history"
_FLAG_WORDS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}


def json_object(raw: bytes) -> dict[str, Any]:
    """A request body as a JSON object, else a 400 saying what is wrong with it."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidChatRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidChatRequest("request body must be a JSON object")
    return body


def model_of(body: dict[str, Any]) -> str:
    """A body's `model`: a non-empty string, else a 400 naming it."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidChatRequest(field_problem("model", model, "a model name"), param="model")
    return model


def parse_chat_request(raw: bytes) -> ChatRequest:
    """Validate a `/v1/chat/completions` body; raises InvalidChatRequest naming the field."""
    body = json_object(raw)
    model = model_of(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidChatRequest(
            field_problem("messages", messages, "a non-empty array of messages"), param="messages"
        )
    _check_messages(messages)
    stream = body.get("stream", False)
    if not isinstance(stream, bool) and stream is not None:
        raise InvalidChatRequest(field_problem("stream", stream, "true or false"), param="stream")
    check_forbidden(body)
    extensions = _extensions(body)
    if extensions:
        body = {k: v for k, v in body.items() if k not in EXTENSION_KEYS}
    return ChatRequest(
        model=model,
        messages=tuple(messages),
        stream=bool(stream),
        body=body,
        raw=None if extensions else raw,
        extensions=extensions,
    )


def edge_context(
    chat: ChatRequest, headers: Mapping[str, str], *, request_id: str, tenant: str
) -> tuple[ChatRequest, RequestContext]:
    """The request without what only overspill reads, and the context resolved from it."""
    metadata = chat.body.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else None
    hint = given_id(headers.get(CONVERSATION_HEADER), metadata)
    if metadata is not None and "conversation_id" in metadata:
        chat = _without_conversation_id(chat, metadata)
    ctx = RequestContext(
        request_id=request_id,
        tenant=tenant,
        conversation_hint=hint,
        opening=chat.messages,
        skip_history=_skip_history(chat, headers.get(SKIP_HEADER)),
    )
    ctx.spend = Spend(tenant, ctx.notes)  # what the request makes overspill spend upstream
    return chat, ctx


def _without_conversation_id(chat: ChatRequest, metadata: Mapping[str, Any]) -> ChatRequest:
    """`metadata.conversation_id` is overspill's: the upstream never sees it."""
    rest = {k: v for k, v in metadata.items() if k != "conversation_id"}
    body = {k: v for k, v in chat.body.items() if k != "metadata"}
    if rest:
        body["metadata"] = rest
    return dataclasses.replace(chat, body=body, raw=None)


def _skip_history(chat: ChatRequest, header: str | None) -> bool:
    """The skip flag: the header, else `overspill.skip_history`; anything else is a 400."""
    if header is not None:
        return skip_history_header(header)
    options = chat.extensions.get("overspill")
    value = options.get("skip_history", False) if options else False
    if not isinstance(value, bool):
        raise InvalidChatRequest(
            field_problem("overspill.skip_history", value, "true or false"),
            param="overspill.skip_history",
        )
    return value


def skip_history_header(header: str | None) -> bool:
    """The `X-Overspill-Skip-History` header's flag (False without one); else a 400."""
    if header is None:
        return False
    flag = _FLAG_WORDS.get(header.strip().lower())
    if flag is None:
        raise InvalidChatRequest(
            f"X-Overspill-Skip-History must be one of {', '.join(_FLAG_WORDS)}",
            param="X-Overspill-Skip-History",
        )
    return flag


def _check_messages(messages: list[Any]) -> None:
    """Validate every message: a quick pass for the common shape, the full check otherwise."""
    roles = ROLES
    for index, message in enumerate(messages):
        if type(message) is dict and message.get("role") in roles:
            content = message.get("content")
            if content is None or type(content) is str:
                continue
        _check_message(index, message)


def _check_message(index: int, message: Any) -> None:
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        raise InvalidChatRequest(field_problem(where, message, "an object"), param=where)
    role = message.get("role")
    if role not in ROLES:
        expected = "one of " + ", ".join(sorted(ROLES))
        raise InvalidChatRequest(field_problem(f"{where}.role", role, expected), param=where)
    content = message.get("content")
    if content is not None and not isinstance(content, str | list):
        raise InvalidChatRequest(
            field_problem(f"{where}.content", content, "a string, an array of parts, or null"),
            param=where,
        )
    if isinstance(content, list):
        for part_index, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise InvalidChatRequest(
                    field_problem(
                        f"{where}.content[{part_index}]", part, 'an object with a "type"'
                    ),
                    param=where,
                )


def check_forbidden(body: Mapping[str, Any], where: str = "") -> None:
    """Refuse connection and credential fields, at the top level and in nested containers."""
    for key in body:
        if key in FORBIDDEN_FIELDS or key.startswith(FORBIDDEN_PREFIXES):
            name = f"{where}{key}"
            raise ForbiddenParameter(
                f"{name!r} cannot be set by a request: connection and credential settings come "
                "from overspill's config.yaml only. Remove it from the request body.",
                param=name,
            )
    for key in NESTED_CHECKED:
        nested = body.get(key)
        if isinstance(nested, dict) and not where:
            check_forbidden(nested, f"{key}.")


def _extensions(body: Mapping[str, Any]) -> dict[str, Any]:
    extensions: dict[str, Any] = {}
    for key, (kind, expected) in EXTENSION_KEYS.items():
        if key in body:
            value = body[key]
            if not isinstance(value, kind):
                raise InvalidChatRequest(field_problem(key, value, expected), param=key)
            extensions[key] = value
    return extensions


def field_problem(name: str, value: Any, expected: str, quote: bool = False) -> str:
    """What is wrong with a body field: missing (`value` None), or not what was `expected`
    (the value said back, `said_back`)."""
    if value is None:
        return f"{name!r} is required: expected {expected}"
    return f"{name!r} must be {expected}, got {said_back(value, quote)}"


_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,23}")
"""A short word a field of set values is given (a role, a mode): said back in a field's
problem, as OpenAI's and Anthropic's errors do. Longer strings (a key pasted into the wrong
field) are only named as strings."""
SAID_NUMBER_CHARS = 24
"""A number this long or shorter is said back (`got -1`, `got 1.5`); a longer one is named."""
QUOTED_CHARS = 100
"""How much of a string a problem quoting it (`quote`: a URL, a type name) says back."""


def said_back(value: Any, quote: bool = False) -> str:
    """How a field's problem names the value it was given: a boolean, a number and null as
    JSON writes them (`true`, `-1`, `1.5`), a short word quoted (`'robot'`), any string
    quoted when `quote` (its first `QUOTED_CHARS`), other values by their JSON kind
    (`an array`, `an empty array`, `a string`): "got a number" told a client that sent 0
    nothing it knew, "must be a non-empty array, got an array" one that sent []."""
    if value is None or isinstance(value, bool):
        return orjson.dumps(value).decode()
    if isinstance(value, int | float):
        number = orjson.dumps(value).decode() if isinstance(value, float) else str(value)
        return number if len(number) <= SAID_NUMBER_CHARS else "a number"
    if isinstance(value, str):
        if quote and len(value) > QUOTED_CHARS:
            return f"{value[:QUOTED_CHARS]!r}…"
        return f"{value!r}" if quote or _TOKEN.fullmatch(value) else "a string"
    if isinstance(value, list):
        return "an array" if value else "an empty array"
    return "an object" if value else "an empty object"


@functools.lru_cache(maxsize=4096)
def tenant_of(key: str | None) -> str:
    """A stable, non-reversible tenant id for a presented key ("anonymous" without one)."""
    if not key:
        return "anonymous"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer ...` header."""
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()
