"""Conversation identity and the hash chain that says which history an extraction summarised.

Identity (`conversation_id`) decides *where* a cached extraction is looked up; the chain
(`chain`, `chain_matches`) decides whether the entry found there may be used. A cached
extraction of ``messages[:end]`` is valid only while the request's first ``end`` messages are
the same (by `canonical` form) and the extraction prompt has not changed: an edited or branched
history, or another prompt version, gives another chain and misses the cache. The chain is one
running sha256 over the prompt version and each message's length-prefixed canonical form, in
order (SHA-256 chains its blocks itself; a digest per message would only cost more). It costs
about 2-3 µs a message on the development box (bench/micro/test_store.py), mostly `canonical`;
a turn that repeats the messages of one its process has seen reuses their chains instead
(kernel/recall.py).

A derived id (no header, no ``metadata.conversation_id``) hashes the tenant, the system and
developer messages before the first user message, and that first user message (and the
client's session id when its requests carry one, as Claude Code's do). It stays the
same as the conversation grows, but two conversations that open identically share it; the
chain keeps them from using each other's extraction, and the condenser keeps several entries
per derived id, one per conversation (middleware/condensing/slots.py).

Pure functions; the only project import is the error tree.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from kernel.errors import InvalidChatRequest, too_deep

__all__ = [
    "DERIVED_PREFIX",
    "canonical",
    "chain",
    "chain_matches",
    "derived_id",
    "given_id",
]

DERIVED_PREFIX = "d-"
"""Prefix of ids derived from the messages (never from a client)."""

_ID_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_ID_RULE = "1-128 characters of A-Z a-z 0-9 . _ : -"
_ID_DOMAIN = b"overspill/conversation/1\0"
_CHAIN_DOMAIN = b"overspill/chain/1\0"
_SESSION_DOMAIN = b"overspill/session/1\0"
_UNMEANING = "cache_control"
"""A content part's key that changes from turn to turn without changing what was said (a
client moves its prompt-cache markers to the newest messages)."""
_OPENING_ROLES = frozenset({"system", "developer"})
# Fields of a message that carry meaning; the SDK's `refusal`, `annotations`, `audio` nulls do not.
# (`function_call` is the legacy form of `tool_calls`: kept when it is not null.)
_KEPT_FIELDS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id", "function_call"})


def given_id(header: str | None, metadata: Mapping[str, Any] | None) -> str | None:
    """The id the client gave (header first, then `metadata.conversation_id`), validated;
    raises InvalidChatRequest naming the field when it is malformed."""
    if header is not None:
        return _validated(header, "X-Conversation-Id")
    given = metadata.get("conversation_id") if metadata is not None else None
    if given is None:
        return None
    if not isinstance(given, str):
        raise InvalidChatRequest(
            f"metadata.conversation_id must be a string ({_ID_RULE})",
            param="metadata.conversation_id",
        )
    return _validated(given, "metadata.conversation_id")


def derived_id(
    tenant: str, messages: Sequence[Mapping[str, Any]], session: str | None = None
) -> str:
    """An id derived from the tenant and the conversation's opening messages (and the client's
    session, when its requests name one: two sessions that open alike stay apart)."""
    digest = hashlib.sha256(_ID_DOMAIN)
    for part in (tenant.encode(), *map(canonical, _opening(messages))):
        _feed(digest, part)
    if session:
        _feed(digest, _SESSION_DOMAIN + session.encode())
    return DERIVED_PREFIX + digest.hexdigest()[:32]


def canonical(message: Mapping[str, Any]) -> bytes:
    """A stable byte form of one message: meaningful fields, no null/empty ones, sorted keys."""
    form: dict[str, Any] = {}
    for key, value in message.items():
        if key not in _KEPT_FIELDS or not _present(value) or (key == "content" and value == ""):
            continue
        if type(value) is str:
            form[key] = value
        elif key == "tool_calls" and isinstance(value, list):
            form[key] = [_tool_call(call) for call in value]
        elif key == "function_call" and isinstance(value, Mapping):
            form[key] = _function(value)
        else:
            form[key] = _pruned(value)
    try:
        return orjson.dumps(form, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError as exc:  # parsed (up to 1024 levels), cannot be written
        raise too_deep("a message") from exc


def chain(messages: Sequence[Mapping[str, Any]], end: int, prompt_version: str) -> str:
    """The sha256 chain (hex) over `messages[:end]`, seeded with the extraction prompt version."""
    if not 0 <= end <= len(messages):
        raise ValueError(f"end must be between 0 and {len(messages)}, got {end}")
    digest = hashlib.sha256(_CHAIN_DOMAIN)
    _feed(digest, prompt_version.encode())
    for index in range(end):
        _feed(digest, canonical(messages[index]))
    return digest.hexdigest()


def chain_matches(
    messages: Sequence[Mapping[str, Any]], end: int, prompt_version: str, expected: str
) -> bool:
    """Whether `messages[:end]` still has the chain `expected` (False when `end` is invalid)."""
    if not 0 <= end <= len(messages):
        return False
    return chain(messages, end, prompt_version) == expected


def _validated(value: str, param: str) -> str:
    if _ID_PATTERN.fullmatch(value):
        return value
    problem = (
        f"is {len(value)} characters long"
        if not 1 <= len(value) <= 128
        else "contains other characters"
    )
    raise InvalidChatRequest(f"{param} must be {_ID_RULE}; the value {problem}", param=param)


def _feed(digest: Any, part: bytes) -> None:
    """Hash one length-prefixed part, so part boundaries are unambiguous."""
    digest.update(len(part).to_bytes(8, "big"))
    digest.update(part)


def _opening(messages: Sequence[Mapping[str, Any]]) -> Iterable[Mapping[str, Any]]:
    """The system/developer messages before the first user message, then that message."""
    for message in messages:
        role = message.get("role")
        if role in _OPENING_ROLES:
            yield message
        elif role == "user":
            yield message
            return


def _tool_call(call: Any) -> Any:
    if not isinstance(call, Mapping):
        return call
    form = {key: call[key] for key in ("id", "type") if _present(call.get(key))}
    function = call.get("function")
    if isinstance(function, Mapping):
        form["function"] = _function(function)
    return form


def _function(function: Mapping[str, Any]) -> dict[str, Any]:
    return {key: function[key] for key in ("name", "arguments") if _present(function.get(key))}


def _pruned(value: Any) -> Any:
    """Content parts without null or empty-list fields, nor cache markers, at any depth."""
    if isinstance(value, Mapping):
        return {
            key: _pruned(item)
            for key, item in value.items()
            if _present(item) and key != _UNMEANING
        }
    if isinstance(value, list):
        return [_pruned(item) for item in value]
    return value


def _present(value: object) -> bool:
    return value is not None and value != []
