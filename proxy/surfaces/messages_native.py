"""A Messages request in Anthropic's wire again, for an upstream that speaks it: pure.

While no layer changed the conversation the client's own bytes go (the fast path). When the
layers changed it (a splice, masked tool results, overspill's recall tool and its answers) the
body is written again: every chat message that is still one the client sent goes as the blocks
it came from (thinking signatures, `cache_control`, documents and all), and what the layers
made is written by overspill's chat → Messages translation (providers/anthropic_wire.py). A
system message the layers made (the condensed history) becomes user text where it stands, so
the turns still begin with the user. A change to parameters a Messages body cannot say is
sent through chat completions instead (`body_for` answers None).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from kernel.errors import too_deep
from kernel.types import MESSAGES_WIRE, ChatRequest, Message
from providers import anthropic_wire
from proxy.surfaces.messages_wire import Origin

PASSED_HEADERS = ("anthropic-version", "anthropic-beta")
"""The client's headers an Anthropic-wire upstream reads with the body."""
REWRITTEN = frozenset({"tools", "max_tokens", "stream", "stream_options"})
"""Chat parameters a layer may change that a Messages body says too."""


@dataclass(frozen=True, slots=True)
class MessagesNative:
    """A Messages request as its client wrote it, for a deployment that speaks the API."""

    body: Mapping[str, Any]
    raw: bytes
    messages: tuple[Message, ...]
    origins: Mapping[int, Origin]
    chat_body: Mapping[str, Any]
    headers: Mapping[str, str]
    wire: str = MESSAGES_WIRE

    def body_for(self, request: ChatRequest, model: str) -> bytes | None:
        """The client's bytes while nothing changed (with the upstream's model name, its body
        re-encoded); the conversation written again when the layers changed it; None (send
        chat completions) when they changed a parameter a Messages body cannot say."""
        params: Mapping[str, Any] = {}
        if request.body is not self.chat_body:
            params = changed(self.chat_body, request.body)
            if not REWRITTEN.issuperset(params):
                return None
        if request.messages is self.messages and not params:
            if model == self.body.get("model"):
                return self.raw
            return _dumps({**self.body, "model": model})
        body = dict(self.body)
        body["model"] = model
        if request.messages is not self.messages:
            made = [
                message
                for message in request.messages
                if id(message) not in self.origins
                and message.get("role") not in ("system", "developer")
            ]  # what `rendered` writes with overspill's translation
            if anthropic_wire.messages_leave(made) is not None:
                return None  # what only litellm writes: through chat completions
            system, turns = self.rendered(request.messages)
            body.pop("system", None)
            if system:
                body["system"] = system
            body["messages"] = turns
        for name in ("max_tokens", "stream"):
            if name in params:
                body[name] = request.body.get(name)
        if "tools" in params:
            body["tools"] = self._tools(request.body.get("tools"))
        return _dumps({k: v for k, v in body.items() if v is not None})

    def rendered(
        self, messages: Sequence[Message]
    ) -> tuple[list[Mapping[str, Any]], list[dict[str, Any]]]:
        """(system blocks, turns) of chat messages: the client's blocks for its own messages,
        overspill's translation for the rest; consecutive turns of a role merged."""
        system: list[Mapping[str, Any]] = []
        turns: list[dict[str, Any]] = []
        for message in messages:
            origin = self.origins.get(id(message))
            if origin is not None and origin.role == "prompt":
                system.extend(origin.blocks)
            elif origin is not None:
                _append(turns, origin.role, list(origin.blocks))
            elif message.get("role") in ("system", "developer"):
                text = message.get("content")
                _append(turns, "user", [{"type": "text", "text": _text(text)}])
            else:
                for turn in anthropic_wire.messages_of([message])[1]:
                    _append(turns, turn["role"], turn["content"])
        return system, turns

    def _tools(self, tools: Any) -> list[Any]:
        """The client's tools, and the chat tools a layer added (as Messages tools)."""
        given = list(self.body.get("tools") or ())
        names = {tool.get("name") for tool in given if isinstance(tool, dict)}
        added = [
            tool
            for tool in tools or ()
            if isinstance(tool, dict) and (tool.get("function") or {}).get("name") not in names
        ]
        return given + anthropic_wire.tools_of(added) if added else given


def changed(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters whose value differs (a removed one as None)."""
    keys = set(before) | set(after)
    return {key: after.get(key) for key in keys if before.get(key) != after.get(key)}


def _append(turns: list[dict[str, Any]], role: str, blocks: list[Any]) -> None:
    """A turn's blocks, merged into the last turn when it is of the same role."""
    if turns and turns[-1]["role"] == role:
        turns[-1]["content"] = [*turns[-1]["content"], *blocks]
    else:
        turns.append({"role": role, "content": blocks})


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else ()
    return "\n\n".join(p["text"] for p in parts if isinstance(p, dict) and "text" in p)


def _dumps(body: Mapping[str, Any]) -> bytes:
    try:
        return orjson.dumps(body)
    except orjson.JSONEncodeError as exc:
        raise too_deep("the request body") from exc
