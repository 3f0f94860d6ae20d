"""Anthropic's Messages API in OpenAI's chat terms, written here: no litellm import.

The pure part of the Anthropic path (`providers/anthropic.py` does the calls): a chat
request's body → a Messages body, a Messages answer → a `chat.completion`, and the Messages
stream's events → `chat.completion.chunk` deltas. It covers what chat clients send: text,
images, system and developer messages, tool calls and results, `cache_control`, the sampling
and length parameters, tools and `tool_choice`. A request that uses more of litellm's
Anthropic support (`response_format`, extended thinking, documents, Anthropic's own server
tools, ...) is found by `leaves` before translating and sent through litellm's translation
instead, so nothing a client could send before is lost; litellm is imported only then.

OpenAI parameters that Anthropic has no equivalent for are refused with a 400 naming them, or
dropped with `litellm_settings.drop_params`, as litellm does. Fields that are not OpenAI's
(`top_k`, ...) go into the body as given: Anthropic's own validation answers for them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from kernel.errors import InvalidChatRequest
from providers.openai_params import OPENAI_CHAT_PARAMS
from providers.translation import (
    UnsupportedParameter,
    data_url,
    image_url,
    litellm_parameter,
    positive_count,
    refuse_unsupported,
    refuses,
    stop_list,
    unchecked,
)

__all__ = ["UnsupportedParameter"]  # the 400, here too

VERSION = "2023-06-01"
"""The `anthropic-version` header sent (the API's current version)."""

DEFAULT_MAX_TOKENS = int(os.environ.get("DEFAULT_ANTHROPIC_CHAT_MAX_TOKENS", "4096"))
"""`max_tokens` when the request has none and litellm's map does not know the model (the
Messages API requires it; litellm's default and environment variable)."""

TRANSLATED = frozenset(
    {
        "stream", "stream_options", "stop", "temperature", "top_p", "max_tokens",
        "max_completion_tokens", "tools", "tool_choice", "parallel_tool_calls", "user",
    }
)  # fmt: skip
"""OpenAI parameters written here."""

LITELLMS = frozenset(
    {
        "response_format", "thinking", "reasoning_effort", "web_search_options",
        "speed", "context_management", "cache_control",
    }
)  # fmt: skip
"""Parameters litellm's Anthropic translation supports and this one does not."""

UNSUPPORTED = OPENAI_CHAT_PARAMS - TRANSLATED - LITELLMS
"""OpenAI parameters Anthropic has no equivalent for (`n`, `seed`, `logit_bias`, ...)."""

FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
"""Anthropic's `stop_reason` → OpenAI's `finish_reason` (anything else: "stop")."""


def request_body(
    body: Mapping[str, Any],
    messages: Sequence[Mapping[str, Any]],
    model: str,
    *,
    max_tokens: int,
    drop_params: bool,
) -> dict[str, Any]:
    """The Messages body for a chat request (`body`: its fields; `messages`: its messages)
    that `leaves` keeps here.

    Raises `UnsupportedParameter` for an OpenAI parameter Anthropic lacks (unless
    `drop_params`), `InvalidChatRequest` for a message or tool that is not OpenAI's shape.
    """
    refuse_unsupported(body, "anthropic", unsupported=UNSUPPORTED, drop_params=drop_params)
    system, turns = _messages(messages)
    out: dict[str, Any] = {"model": model, "messages": turns}
    if system:
        out["system"] = system
    for key, value in body.items():
        if key in ("model", "messages", "stream", "stream_options") or key in UNSUPPORTED:
            continue
        if value is None and key in OPENAI_CHAT_PARAMS:
            continue  # OpenAI's null: the default
        if key in ("max_tokens", "max_completion_tokens"):
            out["max_tokens"] = positive_count(value, key)
        elif key == "stop":
            stops = stop_list(value)
            if stops:
                out["stop_sequences"] = stops
        elif key == "tools":
            out["tools"] = _tools(value)
        elif key == "tool_choice":
            out["tool_choice"] = _tool_choice(value)
        elif key == "parallel_tool_calls":
            continue  # with tool_choice, below
        elif key == "user":
            if isinstance(value, str) and value:
                out["metadata"] = {"user_id": value}
        else:
            out[key] = value
    out.setdefault("max_tokens", max_tokens)
    if body.get("parallel_tool_calls") is False:
        choice = out.setdefault("tool_choice", {"type": "auto"})
        if choice.get("type") != "none":
            choice["disable_parallel_tool_use"] = True
    if body.get("stream"):
        out["stream"] = True
    return out


# -- what is litellm's ---------------------------------------------------------------------


def leaves(
    body: Mapping[str, Any], messages: Sequence[Mapping[str, Any]], *, drop_params: bool
) -> str | None:
    """Why the request is litellm's to write (a parameter, a role, a part or a tool only its
    translation writes), or None: `request_body` writes it, or refuses it with a 400. A
    part of the wrong shape is not a reason: the translation names it in its 400."""
    reason = litellm_parameter(body, LITELLMS)
    if reason is not None or refuses(body, UNSUPPORTED, drop_params):
        return reason
    reason = messages_leave(messages)
    if reason is not None:
        return reason
    tools = body.get("tools")
    for i, tool in enumerate(tools if isinstance(tools, list) else ()):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            return f"tools[{i}]: not a function"
    return None


def messages_leave(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """Why chat messages are litellm's to write (`messages_of`), or None."""
    for index, message in enumerate(messages):
        role = message.get("role")
        if role not in _ROLES:
            return f"messages[{index}].role {role!r}"
        if role == "assistant" and message.get("thinking_blocks"):
            return f"messages[{index}].thinking_blocks"
        content = message.get("content")
        if type(content) is not list:  # a string (most messages): nothing to look at
            continue
        images = role in ("user", "tool")
        for i, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else "text"  # not one: a 400
            if kind != "text" and not (kind == "image_url" and images):
                return f"messages[{index}].content[{i}].type {kind!r}"
    return None


_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


# -- messages ---------------------------------------------------------------------------------


def messages_of(
    messages: Sequence[Mapping[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the system blocks, the turns) of chat messages that `messages_leave` keeps here, as
    `request_body` writes them."""
    return _messages(messages)


def tools_of(tools: object) -> list[dict[str, Any]]:
    """Chat function tools as Messages tools, as `request_body` writes them."""
    return _tools(tools)


def _messages(items: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], list[Any]]:
    """(the system blocks, the turns): system and developer messages become `system`, tool
    results user turns, and consecutive turns of one role merge (Anthropic alternates)."""
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    for index, message in enumerate(items):
        where = f"messages[{index}]"
        role = message.get("role")
        content = message.get("content")
        if role in ("system", "developer"):
            system.extend(_mark(_blocks(content, where, images=False), message))
            continue
        if role == "user":
            blocks = _blocks(content, where, images=True)
        elif role == "assistant":
            blocks = _assistant(message, where)
            if not blocks:
                continue  # an empty assistant turn: nothing to send
        elif role == "tool":
            role = "user"
            blocks = [_tool_result(message, where)]
        else:
            raise unchecked(f"{where}.role {role!r}")
        blocks = _mark(blocks, message)
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return system, turns


def _mark(blocks: list[dict[str, Any]], message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A message's own `cache_control` goes on its last block (where Anthropic reads it)."""
    control = message.get("cache_control")
    if control is not None and blocks:
        blocks[-1] = {**blocks[-1], "cache_control": control}
    return blocks


def _blocks(content: object, where: str, *, images: bool) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if content is None:
        return []
    if not isinstance(content, list):
        raise InvalidChatRequest(f"{where}.content must be a string or a list of parts")
    return [_part(part, f"{where}.content[{i}]", images) for i, part in enumerate(content)]


def _part(part: object, where: str, images: bool) -> dict[str, Any]:
    if not isinstance(part, dict):
        raise InvalidChatRequest(f"{where} must be an object with a type")
    kind = part.get("type")
    if kind == "text":
        text = part.get("text")
        if not isinstance(text, str):
            raise InvalidChatRequest(f"{where}.text must be a string")
        block: dict[str, Any] = {"type": "text", "text": text}
    elif kind == "image_url" and images:
        block = {"type": "image", "source": _image(part.get("image_url"), where)}
    else:
        raise unchecked(f"{where}.type {kind!r}")
    control = part.get("cache_control")
    if control is not None:
        block["cache_control"] = control
    return block


def _image(value: object, where: str) -> dict[str, str]:
    """An image_url part's source: a `data:` URL's bytes, or the URL for Anthropic to fetch."""
    url = image_url(value, where)
    if url.startswith("data:"):
        media, data = data_url(url, where)
        return {"type": "base64", "media_type": media, "data": data}
    if url.startswith(("https://", "http://")):
        return {"type": "url", "url": url}
    raise InvalidChatRequest(f"{where}.image_url.url must be an http(s) or data: URL")


def _assistant(message: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
    """An assistant turn's text (empty text left out: Anthropic refuses it) and tool calls."""
    if message.get("thinking_blocks"):
        raise unchecked(f"{where}.thinking_blocks")
    blocks = [
        block
        for block in _blocks(message.get("content"), where, images=False)
        if block.get("text") != ""
    ]
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise InvalidChatRequest(f"{where}.tool_calls must be a list")
    for i, call in enumerate(calls):
        blocks.append(_tool_use(call, f"{where}.tool_calls[{i}]"))
    return blocks


def _tool_use(call: object, where: str) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(call, dict) or not isinstance(function, dict):
        raise InvalidChatRequest(f"{where} must be an object with a function")
    name, arguments = function.get("name"), function.get("arguments") or "{}"
    if not isinstance(name, str) or not isinstance(arguments, str):
        raise InvalidChatRequest(f"{where}.function needs a name and arguments (strings)")
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        raise InvalidChatRequest(f"{where}.function.arguments must be a JSON object")
    return {"type": "tool_use", "id": call.get("id"), "name": name, "input": parsed}


def _tool_result(message: Mapping[str, Any], where: str) -> dict[str, Any]:
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str):
        raise InvalidChatRequest(f"{where}.tool_call_id must be the id of the tool call")
    content = message.get("content")
    result = content if isinstance(content, str) else _blocks(content, where, images=True)
    return {"type": "tool_result", "tool_use_id": call_id, "content": result}


# -- tools ------------------------------------------------------------------------------------


def _tools(tools: object) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise InvalidChatRequest("tools must be a list", param="tools")
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise unchecked(f"tools[{i}]: not a function")
        function = tool.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(function, dict) or not isinstance(name, str):
            raise InvalidChatRequest(f"tools[{i}].function needs a name", param="tools")
        schema = function.get("parameters") or {"type": "object", "properties": {}}
        written: dict[str, Any] = {"name": name, "input_schema": schema}
        if function.get("description") is not None:
            written["description"] = function["description"]
        if tool.get("cache_control") is not None:
            written["cache_control"] = tool["cache_control"]
        out.append(written)
    return out


def _tool_choice(choice: object) -> dict[str, Any]:
    named = {"auto": "auto", "required": "any", "none": "none"}
    if isinstance(choice, str) and choice in named:
        return {"type": named[choice]}
    function = choice.get("function") if isinstance(choice, dict) else None
    if isinstance(function, dict) and isinstance(function.get("name"), str):
        return {"type": "tool", "name": function["name"]}
    raise InvalidChatRequest(
        'tool_choice must be "auto", "required", "none" or '
        '{"type": "function", "function": {"name": ...}}',
        param="tool_choice",
    )


# -- the answer -------------------------------------------------------------------------------


def answer(data: object, created: int) -> dict[str, Any]:
    """A Messages answer as a `chat.completion`; ValueError when it is not one."""
    if not isinstance(data, dict) or not isinstance(data.get("content"), list):
        raise ValueError("no content list")
    text: list[str] = []
    thinking: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in data["content"]:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            text.append(str(block.get("text", "")))
        elif kind == "tool_use":
            arguments = orjson.dumps(block.get("input") or {}).decode()
            function = {"name": block.get("name"), "arguments": arguments}
            calls.append({"id": block.get("id"), "type": "function", "function": function})
        elif kind == "thinking":
            thinking.append(str(block.get("thinking", "")))
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        message["tool_calls"] = calls
    elif message["content"] is None:
        message["content"] = ""
    if thinking:
        message["reasoning_content"] = "".join(thinking)
    out: dict[str, Any] = {
        "id": data.get("id"),
        "object": "chat.completion",
        "created": created,
        "model": data.get("model"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish(data)}],
    }
    usage = data.get("usage")
    if isinstance(usage, dict):
        out["usage"] = usage_of(usage)
    return out


def finish(data: Mapping[str, Any]) -> str:
    reason = data.get("stop_reason")
    return FINISH.get(reason, "stop") if isinstance(reason, str) else "stop"


def usage_of(usage: Mapping[str, Any]) -> dict[str, Any]:
    """Anthropic's usage in OpenAI's terms: prompt tokens count the cached ones too."""
    written = _tokens(usage, "cache_creation_input_tokens")
    read = _tokens(usage, "cache_read_input_tokens")
    prompt = _tokens(usage, "input_tokens") + written + read
    completion = _tokens(usage, "output_tokens")
    out: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if written or read:
        out["prompt_tokens_details"] = {"cached_tokens": read, "cache_creation_tokens": written}
        out["cache_creation_input_tokens"] = written
        out["cache_read_input_tokens"] = read
    return out


def _tokens(usage: Mapping[str, Any], key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) else 0


# -- the stream -------------------------------------------------------------------------------


class StreamEvents:
    """One stream's state: what each Messages event becomes in OpenAI's chunks."""

    def __init__(self) -> None:
        self.id: str | None = None
        self.model: str | None = None
        self.usage: dict[str, Any] = {}
        self.calls: dict[int, int] = {}
        """A tool_use block's index → its tool call's index (OpenAI counts tool calls)."""
        self.started = 0
        """Tool calls started so far."""
        self.finished = False
        """Never set here: the relay sees the end event (`message_stop`) itself."""

    def openai_usage(self) -> dict[str, Any] | None:
        """The usage so far in OpenAI's terms (None before any)."""
        return usage_of(self.usage) if self.usage else None

    def delta(self, event: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
        """(the delta to send or None, the finish reason or None) for one event."""
        kind = event.get("type")
        if kind == "content_block_delta":
            delta = event.get("delta")
            if not isinstance(delta, dict):
                return None, None
            part = delta.get("type")
            if part == "text_delta":
                return {"content": delta.get("text", "")}, None
            if part == "input_json_delta":
                index = event.get("index")
                call = self.calls.get(index) if isinstance(index, int) else None
                partial = delta.get("partial_json")
                if call is None or not partial:
                    return None, None
                return {"tool_calls": [{"index": call, "function": {"arguments": partial}}]}, None
            if part == "thinking_delta":
                return {"reasoning_content": delta.get("thinking", "")}, None
            return None, None
        if kind == "content_block_start":
            return self._start(event), None
        if kind == "message_start":
            message = event.get("message")
            if isinstance(message, dict):
                self.id = message.get("id")
                self.model = message.get("model")
                self._count(message.get("usage"))
            return {"content": ""}, None
        if kind == "message_delta":
            self._count(event.get("usage"))
            delta = event.get("delta")
            return {}, finish(delta if isinstance(delta, dict) else {})
        return None, None  # content_block_stop, and events this version does not know

    def _start(self, event: Mapping[str, Any]) -> dict[str, Any] | None:
        block = event.get("content_block")
        if not isinstance(block, dict):
            return None
        if block.get("type") == "text" and block.get("text"):
            return {"content": block["text"]}
        if block.get("type") != "tool_use":
            return None
        call = self.started
        self.started += 1
        index = event.get("index")
        if isinstance(index, int):
            self.calls[index] = call
        arguments = orjson.dumps(block["input"]).decode() if block.get("input") else ""
        function = {"name": block.get("name"), "arguments": arguments}
        return {
            "tool_calls": [
                {"index": call, "id": block.get("id"), "type": "function", "function": function}
            ]
        }

    def _count(self, usage: object) -> None:
        if isinstance(usage, dict):
            self.usage.update({k: v for k, v in usage.items() if isinstance(v, int)})
