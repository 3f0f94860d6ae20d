"""Google AI Studio's Gemini API in OpenAI's chat terms, written here: no litellm import.

The pure part of the Gemini path (`providers/gemini.py` does the calls): a chat request's body
→ a `generateContent` body, a `GenerateContentResponse` → a `chat.completion`, and the stream's
events (each a whole `GenerateContentResponse`) → `chat.completion.chunk` deltas. It writes
what litellm writes for the requests chat clients send: text, `data:` images, system and
developer messages, tool calls and results (with Gemini 3's call ids and thought signatures),
the sampling and length parameters, function tools with plain JSON schemas, `tool_choice`.
A request that uses more of litellm's Gemini support (`response_format`, reasoning, web
search, image URLs litellm downloads, audio and files, schemas with `$ref`/`anyOf`, safety
settings, cached content, ...) is found by `leaves` before translating and goes through
litellm instead.

OpenAI parameters that Gemini has no equivalent for are refused with a 400 naming them, or
dropped with `litellm_settings.drop_params`, as litellm does.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from kernel.errors import InvalidChatRequest
from kernel.json_values import is_int
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

DEFAULT_API_BASE = "https://generativelanguage.googleapis.com"

TRANSLATED = frozenset(
    {
        "stream", "stream_options", "stop", "temperature", "top_p", "max_tokens",
        "max_completion_tokens", "n", "seed", "presence_penalty", "frequency_penalty",
        "tools", "tool_choice", "parallel_tool_calls", "user",
    }
)  # fmt: skip
"""OpenAI parameters written here (`user` and `parallel_tool_calls` send nothing, as in
litellm)."""

LITELLMS = frozenset(
    {
        "response_format", "reasoning_effort", "thinking", "web_search_options", "modalities",
        "audio", "logprobs", "service_tier", "functions",
    }
)  # fmt: skip
"""Parameters litellm's Gemini translation supports and this one does not."""

UNSUPPORTED = OPENAI_CHAT_PARAMS - TRANSLATED - LITELLMS
"""OpenAI parameters Gemini has no equivalent for (`logit_bias`, `metadata`, `store`, ...)."""

CONFIG = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "n": "candidate_count",
    "seed": "seed",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
}
"""Parameters that go into `generationConfig` as given, by their key there."""

UNWRITTEN = frozenset(
    {"model", "messages", "stream", "stream_options", "user", "parallel_tool_calls"}
)
"""Fields of the request that are not written into the body's parameters."""

WRITTEN = frozenset({*CONFIG, "max_tokens", "max_completion_tokens", "stop", "tool_choice"})
"""Parameters written into the body as they are (`tools` has its own check)."""

PENALTIES = frozenset({"presence_penalty", "frequency_penalty"})
"""Left out for Gemini 3 and newer (which refuse them), as litellm does."""

FINISH = {
    "STOP": "stop",
    "FINISH_REASON_UNSPECIFIED": "stop",
    "MAX_TOKENS": "length",
    "MALFORMED_FUNCTION_CALL": "stop",
    "TOO_MANY_TOOL_CALLS": "stop",
    "MALFORMED_RESPONSE": "stop",
    "UNEXPECTED_TOOL_CALL": "stop",
    "MISSING_THOUGHT_SIGNATURE": "stop",
}
"""Gemini's `finishReason` → OpenAI's `finish_reason`; every other known reason (SAFETY,
RECITATION, BLOCKLIST, LANGUAGE, OTHER, ...) is `content_filter`, an unknown one `stop`."""

FILTERED = frozenset(
    {
        "SAFETY", "RECITATION", "LANGUAGE", "OTHER", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII",
        "IMAGE_SAFETY", "IMAGE_PROHIBITED_CONTENT", "NO_IMAGE", "IMAGE_RECITATION",
        "IMAGE_OTHER", "ESCALATION",
    }
)  # fmt: skip

FLAGGED = frozenset(
    {
        "SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
    }
)  # fmt: skip
"""A first candidate stopped for these is answered as filtered, without its content."""

SIGNATURE_SEPARATOR = "__thought__"
"""A tool call id carries its thought signature after this (litellm's encoding, so that an
OpenAI client sends the signature back with the id)."""

PLACEHOLDER_SIGNATURE = "c2tpcF90aG91Z2h0X3NpZ25hdHVyZV92YWxpZGF0b3I="
"""What Gemini 3 accepts on a replayed call that has no signature of its own (base64 of
`skip_thought_signature_validator`), as litellm sends it."""

_PRE_GEMINI_3 = re.compile(
    r"^gemini-(?:[12](?:\.\d+)?|exp|(?:pro|flash)(?!-(?:lite-)?latest$))(?:-|$)"
)


def gemini_3_or_newer(model: str) -> bool:
    """Whether a model is Gemini 3 or newer (litellm's rule): those take call ids, want
    thought signatures, refuse penalties, default to temperature 1 and live under v1alpha."""
    name = model.split("/")[-1].lower()
    if not name or name.isdigit() or name.startswith("gemma-"):
        return False
    return _PRE_GEMINI_3.match(name) is None


def url(model: str, base: str | None, *, stream: bool) -> str:
    """A model's call, as litellm makes it: a custom `base` as given (its API version
    included) then the model's path; else Google's, under v1alpha for Gemini 3 and newer,
    v1beta for older models."""
    if not base:
        base = DEFAULT_API_BASE + ("/v1alpha" if gemini_3_or_newer(model) else "/v1beta")
    if stream:
        return f"{base}/models/{model}:streamGenerateContent?alt=sse"
    return f"{base}/models/{model}:generateContent"


def request_body(
    body: Mapping[str, Any],
    messages: Sequence[Mapping[str, Any]],
    model: str,
    *,
    system_instruction: bool,
    drop_params: bool,
) -> dict[str, Any]:
    """The `generateContent` body for a chat request (`body`: its fields; `messages`: its
    messages; `system_instruction`: whether the model takes one, per litellm's map) that
    `leaves` keeps here.

    Raises `UnsupportedParameter` for an OpenAI parameter Gemini lacks (unless
    `drop_params`), `InvalidChatRequest` for a message or tool that is not OpenAI's shape.
    """
    refuse_unsupported(body, "gemini", unsupported=UNSUPPORTED, drop_params=drop_params)
    newer = gemini_3_or_newer(model)
    config: dict[str, Any] = {}
    tools: list[dict[str, Any]] | None = None
    tool_config: dict[str, Any] | None = None
    for key, value in body.items():
        if key in UNWRITTEN or key in UNSUPPORTED or value is None:
            continue  # dropped; OpenAI's null: the default
        if key in CONFIG:
            if not (newer and key in PENALTIES):
                config[CONFIG[key]] = value
        elif key in ("max_tokens", "max_completion_tokens"):
            config["max_output_tokens"] = positive_count(value, key)
        elif key == "stop":
            config["stop_sequences"] = stop_list(value)
        elif key == "tools":
            tools = _tools(value)
        elif key == "tool_choice":
            tool_config = _tool_choice(value)
        else:
            raise unchecked(key)  # safety_settings, cached_content, ...: litellm's
    if newer:
        config.setdefault("temperature", 1.0)
    system, contents = _contents(messages, newer, system_instruction)
    out: dict[str, Any] = {"contents": contents}
    if system:
        out["system_instruction"] = {"parts": system}
    if tools:
        out["tools"] = [{"function_declarations": tools}]
    if tool_config is not None:
        out["toolConfig"] = tool_config
    if config:
        out["generationConfig"] = config
    return out


# -- what is litellm's ---------------------------------------------------------------------


def leaves(
    body: Mapping[str, Any],
    messages: Sequence[Mapping[str, Any]],
    *,
    system_instruction: bool,
    drop_params: bool,
) -> str | None:
    """Why the request is litellm's to write (a parameter, a message, a part, a tool or a
    schema keyword only its translation writes), or None: `request_body` writes it, or
    refuses it with a 400. A part of the wrong shape is not a reason: the translation names
    it in its 400."""
    reason = litellm_parameter(body, LITELLMS)
    if reason is not None or refuses(body, UNSUPPORTED, drop_params):
        return reason
    for key, value in body.items():
        if value is None or key in UNWRITTEN or key in UNSUPPORTED or key in WRITTEN:
            continue
        reason = _tools_leave(value) if key == "tools" else key  # safety_settings, ...
        if reason is not None:
            return reason
    if body.get("stream") and body.get("n") not in (None, 1):
        return "n with stream"
    return _messages_leave(messages, system_instruction)


def _messages_leave(items: Sequence[Mapping[str, Any]], system_instruction: bool) -> str | None:
    """Why the messages are litellm's to write (`_contents`), or None: the first message
    that is (one pass; `_contents` reads the system messages first, so where a request has
    two reasons the one named may differ, never the road)."""
    for index, message in enumerate(items):
        if not isinstance(message, Mapping):
            continue  # a 400
        role = message.get("role")
        content = message.get("content")
        reason = None
        if role == "user":
            if type(content) is list:  # a string (most messages): nothing to see
                reason = _user_leave(content, f"messages[{index}]")
        elif role == "assistant":
            for key in _ASSISTANT_LITELLMS:
                if message.get(key) is not None:
                    return f"messages[{index}].{key}"
        elif role == "tool" and isinstance(content, str):
            reason = f"messages[{index}].content: an image" if _image_text(content) else None
        elif role == "tool":
            reason = _texts_leave(content, f"messages[{index}]")
        elif role in ("system", "developer"):
            reason = _system_leave(content, f"messages[{index}]", system_instruction)
        else:
            reason = f"messages[{index}].role {role!r}"
        if reason is not None:
            return reason
    return None


def _system_leave(content: object, where: str, system_instruction: bool) -> str | None:
    """A system message is litellm's for a model without system instructions, without
    content (litellm keeps it among the turns, where it splits them), or with parts that
    are not text."""
    if not system_instruction:
        return f"{where}: a system message for this model"
    if content is None:
        return f"{where}: a system message without content"
    return _texts_leave(content, where)


_ASSISTANT_LITELLMS = ("function_call", "images", "provider_specific_fields")
"""An assistant message's fields only litellm writes."""


def _tools_leave(tools: object) -> str | None:
    """A tool other than a function, or a schema only litellm rewrites, is litellm's."""
    for i, tool in enumerate(tools if isinstance(tools, list) else ()):
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            return f"tools[{i}]: not a function"
        function = tool.get("function")
        if not isinstance(function, dict):
            return f"tools[{i}]: not a function"
        parameters = function.get("parameters")
        if isinstance(parameters, dict):
            reason = _schema_leave(parameters, f"tools[{i}].function.parameters")
            if reason is not None:
                return reason
    return None


def _schema_leave(node: Mapping[str, Any], where: str) -> str | None:
    """What of a JSON schema needs litellm's rewriting (`$ref`, `anyOf`, a list of types,
    ...), if anything; `_schema` writes the rest."""
    kind = node.get("type")
    if kind is not None and not isinstance(kind, str):
        return f"{where}.type: not a single type"
    for key, value in node.items():
        reason = None
        if key == "properties":
            if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
                return f"{where}.properties: not a map of schemas"
            if "strict" in value or "additionalProperties" in value:
                return f"{where}.properties: a property litellm would drop"
            found = (_schema_leave(v, f"{where}.properties.{k}") for k, v in value.items())
            reason = next((r for r in found if r is not None), None)
        elif key == "items":
            if not isinstance(value, dict):
                return f"{where}.items: not a schema"
            reason = _schema_leave(value, f"{where}.items")
        elif key not in _SCHEMA_DROPPED and key not in _SCHEMA_KEPT and key not in SCHEMA_READ:
            reason = f"{where}.{key}"
        if reason is not None:
            return reason
    return None


def _image_text(text: str) -> bool:
    """A tool result that is a `data:` image (litellm sends it as one)."""
    return text[:5].lower() == "data:" and ";base64," in text


def _texts_leave(content: object, where: str) -> str | None:
    """A list of parts that are not all text is litellm's (a system message, a tool result)."""
    for i, part in enumerate(content if isinstance(content, list) else ()):
        if not isinstance(part, dict) or part.get("type") != "text":
            return f"{where}.content[{i}]: not text"
    return None


def _user_leave(content: object, where: str) -> str | None:
    """A user message's part other than text and a `data:` image is litellm's."""
    for i, part in enumerate(content if isinstance(content, list) else ()):
        at = f"{where}.content[{i}]"
        kind = part.get("type") if isinstance(part, dict) else "text"  # not one: a 400
        if kind == "image_url":
            reason = _image_leave(part.get("image_url"), at)
            if reason is not None:
                return reason
        elif kind != "text":
            return f"{at}.type {kind!r}"
    return None


IMAGE_SCHEMES = ("https://", "http://", "gs://")
"""The image URLs litellm writes for Gemini (it downloads them, or sends a file URI)."""


def _image_leave(value: object, where: str) -> str | None:
    """A URL is litellm's (it downloads it, or sends a file URI), as is a part with its own
    media type or a detail level (media resolution); any other URL is a 400."""
    if isinstance(value, dict) and (
        value.keys() & {"format", "mime_type", "content_type"}
        or value.get("detail") in ("low", "medium", "high", "ultra_high")
    ):
        return f"{where}.image_url: a media type or detail"
    url = value.get("url") if isinstance(value, dict) else value
    if isinstance(url, str) and not url.startswith("data:"):
        if not url.startswith(IMAGE_SCHEMES):  # litellm would fail on it in its own code
            raise InvalidChatRequest(
                f"{where}.image_url.url must be an http(s), gs:// or data: URL"
            )
        return f"{where}.image_url: a URL"
    return None


# -- messages ---------------------------------------------------------------------------------


class _Turns:
    """The contents being written: Gemini's `user` / `model` turns, in litellm's grouping."""

    def __init__(self, newer: bool) -> None:
        self.newer = newer
        self.contents: list[dict[str, Any]] = []
        self.results: list[dict[str, Any]] = []
        self.calls: list[Any] = []
        """The tool calls of the last assistant message that made any (names for results)."""

    def add(self, role: str, parts: list[dict[str, Any]]) -> None:
        if parts:
            self.contents.append({"role": role, "parts": parts})

    def flush_results(self) -> None:
        self.add("user", self.results)
        self.results = []


def _contents(
    items: Sequence[Mapping[str, Any]], newer: bool, system_instruction: bool
) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
    """(the system instruction's parts, the contents). Consecutive user messages make one
    turn, consecutive assistant messages one, consecutive tool results one, as litellm
    groups them."""
    system: list[dict[str, str]] = []
    rest: list[tuple[int, Mapping[str, Any]]] = []
    for index, message in enumerate(items):
        if not isinstance(message, Mapping):
            raise InvalidChatRequest(f"messages[{index}] must be an object")
        if message.get("role") in ("system", "developer"):
            if not system_instruction:
                raise unchecked(f"messages[{index}]: a system message for this model")
            system.append({"text": _system_text(message.get("content"), f"messages[{index}]")})
        else:
            rest.append((index, message))
    if system and not rest:
        rest.append((len(items), {"role": "user", "content": "."}))
    turns = _Turns(newer)
    at = 0
    while at < len(rest):
        start = at
        parts: list[dict[str, Any]] = []
        while at < len(rest) and rest[at][1].get("role") == "user":
            index, message = rest[at]
            parts.extend(_user_parts(message.get("content"), f"messages[{index}]"))
            at += 1
        if parts and not any("text" in part for part in parts):
            parts.append({"text": " "})  # Gemini refuses a user turn without text
        turns.add("user", parts)
        parts = []
        while at < len(rest) and rest[at][1].get("role") == "assistant":
            index, message = rest[at]
            _assistant(message, f"messages[{index}]", parts, turns)
            at += 1
        turns.add("model", parts)
        if at < len(rest) and rest[at][1].get("role") == "tool":
            index, message = rest[at]
            turns.results.append(_tool_result(message, f"messages[{index}]", turns))
            at += 1
        if at < len(rest) and rest[at][1].get("role") != "tool":
            turns.flush_results()
        if at == start:
            index, message = rest[at]
            raise unchecked(f"messages[{index}].role {message.get('role')!r}")
    turns.flush_results()
    if not turns.contents:
        turns.add("user", [{"text": " "}])
    return system, turns.contents


def _system_text(content: object, where: str) -> str:
    if isinstance(content, str):
        return content
    if content is None:  # litellm keeps it among the turns, where it splits them
        raise unchecked(f"{where}: a system message without content")
    if not isinstance(content, list):
        raise InvalidChatRequest(f"{where}.content must be a string or a list of parts")
    texts: list[str] = []
    for i, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") != "text":
            raise unchecked(f"{where}.content[{i}]: not text")
        text = part.get("text")
        if text is not None and not isinstance(text, str):
            raise InvalidChatRequest(f"{where}.content[{i}].text must be a string")
        texts.append(text or "")
    return "".join(texts)


def _user_parts(content: object, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"text": content}]
    if content is None:
        return []
    if not isinstance(content, list):
        raise InvalidChatRequest(f"{where}.content must be a string or a list of parts")
    parts: list[dict[str, Any]] = []
    for i, part in enumerate(content):
        at = f"{where}.content[{i}]"
        if not isinstance(part, dict):
            raise InvalidChatRequest(f"{at} must be an object with a type")
        kind = part.get("type")
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise InvalidChatRequest(f"{at}.text must be a string")
            if text:
                parts.append({"text": text})
        elif kind == "image_url":
            parts.append(_image(part.get("image_url"), at))
        else:
            raise unchecked(f"{at}.type {kind!r}")
    return parts


def _image(value: object, where: str) -> dict[str, Any]:
    """A `data:` image inline; a URL is litellm's (it downloads it, or sends a file URI),
    as is a part with its own media type or a detail level (media resolution)."""
    if isinstance(value, dict) and (
        value.keys() & {"format", "mime_type", "content_type"}
        or value.get("detail") in ("low", "medium", "high", "ultra_high")
    ):
        raise unchecked(f"{where}.image_url: a media type or detail")
    url = image_url(value, where)
    if not url.startswith("data:"):
        raise unchecked(f"{where}.image_url: a URL")
    media, data = data_url(url, where)
    return {"inline_data": {"data": data, "mime_type": media}}


def _assistant(
    message: Mapping[str, Any], where: str, parts: list[dict[str, Any]], turns: _Turns
) -> None:
    """An assistant message's parts, added to the model turn's `parts`."""
    for key in ("function_call", "images", "provider_specific_fields"):
        if message.get(key) is not None:
            raise unchecked(f"{where}.{key}")
    reasoning = message.get("reasoning_content")
    if reasoning is not None:
        if not isinstance(reasoning, str):
            raise InvalidChatRequest(f"{where}.reasoning_content must be a string")
        parts.append({"thought": True, "text": reasoning})
    content = message.get("content")
    if isinstance(content, str):
        parts.append({"text": content})
    elif isinstance(content, list):
        for i, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") == "text":
                text = part.get("text")
                if not isinstance(text, str):
                    raise InvalidChatRequest(f"{where}.content[{i}].text must be a string")
                parts.append({"text": text})
    elif content is not None:
        raise InvalidChatRequest(f"{where}.content must be a string or a list of parts")
    calls = message.get("tool_calls")
    if calls is None:
        return
    if not isinstance(calls, list):
        raise InvalidChatRequest(f"{where}.tool_calls must be a list")
    for i, call in enumerate(calls):
        part = _function_call(call, f"{where}.tool_calls[{i}]", turns.newer, first=i == 0)
        if not any(p.get("function_call") == part["function_call"] for p in parts):
            parts.append(part)
    if calls:
        turns.calls = calls


def _function_call(call: object, where: str, newer: bool, *, first: bool) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(call, dict) or not isinstance(function, dict):
        raise InvalidChatRequest(f"{where} must be an object with a function")
    name, arguments = function.get("name") or "", function.get("arguments", "")
    if not isinstance(name, str) or not isinstance(arguments, str):
        raise InvalidChatRequest(f"{where}.function needs a name and arguments (strings)")
    if arguments:
        try:
            args = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            args = None
        if not isinstance(args, dict):
            raise InvalidChatRequest(f"{where}.function.arguments must be a JSON object")
    else:
        args = {"type": "object"}  # litellm's stand-in for no arguments
    written: dict[str, Any] = {"name": name, "args": args}
    call_id = call.get("id")
    if call_id is not None and not isinstance(call_id, str):
        raise InvalidChatRequest(f"{where}.id must be a string")
    if newer and call_id:
        bare = call_id.split(SIGNATURE_SEPARATOR, 1)[0]
        if bare:
            written["id"] = bare
    part: dict[str, Any] = {"function_call": written}
    signature = _signature(call, function)
    if signature is None and first and newer:
        signature = PLACEHOLDER_SIGNATURE
    if signature:
        part["thoughtSignature"] = signature
    return part


def _signature(call: Mapping[str, Any], function: Mapping[str, Any]) -> str | None:
    """A call's thought signature: its own field, its function's, or the one in its id."""
    for holder in (call, function):
        fields = holder.get("provider_specific_fields")
        if isinstance(fields, dict) and fields.get("thought_signature"):
            return str(fields["thought_signature"])
    call_id = call.get("id")
    if isinstance(call_id, str) and SIGNATURE_SEPARATOR in call_id:
        return call_id.split(SIGNATURE_SEPARATOR, 1)[1]
    return None


def _tool_result(message: Mapping[str, Any], where: str, turns: _Turns) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, str):
        if _image_text(content):
            raise unchecked(f"{where}.content: an image")
        text = content
    elif isinstance(content, list):
        texts: list[str] = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text":
                raise unchecked(f"{where}.content[{i}]: not text")
            value = part.get("text", "")
            if not isinstance(value, str):
                raise InvalidChatRequest(f"{where}.content[{i}].text must be a string")
            texts.append(value)
        text = "".join(texts)
    elif content is None:
        text = ""
    else:
        raise InvalidChatRequest(f"{where}.content must be a string or a list of parts")
    call_id = message.get("tool_call_id")
    name = message.get("name") or ""
    for call in turns.calls:
        if isinstance(call, dict) and call_id and call.get("id") == call_id:
            function = call.get("function")
            name = function.get("name", "") if isinstance(function, dict) else ""
    if not isinstance(name, str) or not name:
        raise InvalidChatRequest(
            f"{where}.tool_call_id must be the id of a tool call of the assistant message before it"
        )
    written: dict[str, Any] = {"name": name, "response": _response(text)}
    if turns.newer and isinstance(call_id, str):
        bare = call_id.split(SIGNATURE_SEPARATOR, 1)[0]
        if bare:
            written["id"] = bare
    return {"function_response": written}


def _response(text: str) -> dict[str, Any]:
    """A tool result as Gemini's response object: a JSON object as itself, else the text."""
    if text.strip().startswith(("{", "[")):
        try:
            parsed = orjson.loads(text)
        except orjson.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
    return {"content": text}


# -- tools ------------------------------------------------------------------------------------


def _tools(tools: object) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise InvalidChatRequest("tools must be a list", param="tools")
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            raise unchecked(f"tools[{i}]: not a function")
        function = tool.get("function")
        if not isinstance(function, dict):
            raise unchecked(f"tools[{i}]: not a function")
        name = function.get("name")
        if not isinstance(name, str):
            raise InvalidChatRequest(f"tools[{i}].function needs a name", param="tools")
        declaration: dict[str, Any] = {"name": name}
        if function.get("description") is not None:
            declaration["description"] = function["description"]
        parameters = function.get("parameters")
        if parameters == "":
            declaration["parameters"] = {"type": "object"}
        elif isinstance(parameters, dict):
            declaration["parameters"] = _schema(parameters, f"tools[{i}].function.parameters")
        elif parameters is not None:
            raise InvalidChatRequest(
                f"tools[{i}].function.parameters must be a JSON schema", param="tools"
            )
        out.append(declaration)
    return out


_SCHEMA_KEPT = frozenset(
    {
        "type", "title", "description", "nullable", "default", "example", "required",
        "minItems", "maxItems", "minProperties", "maxProperties", "minimum", "maximum",
        "minLength", "maxLength", "pattern", "propertyOrdering",
    }
)  # fmt: skip
"""Schema keywords Gemini's Schema has, sent as given."""

_SCHEMA_DROPPED = frozenset({"additionalProperties", "strict", "$schema", "$id", "examples"})
"""Keywords left out (Gemini's Schema has no such field)."""

SCHEMA_READ = frozenset({"enum", "format"})
"""Keywords written as Gemini takes them (an enum on strings only, two formats)."""


def _schema(node: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A plain JSON schema as Gemini's Schema, as litellm rewrites it: unknown keywords left
    out, `type: object` where there is none or where there are properties, an array's
    missing items an object, an enum only on strings. A schema that needs more of litellm's
    rewriting (`$ref`, `anyOf`, a list of types, ...) is litellm's."""
    kind = node.get("type")
    if kind is not None and not isinstance(kind, str):
        raise unchecked(f"{where}.type: not a single type")
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _SCHEMA_DROPPED:
            continue
        if key == "properties":
            if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
                raise unchecked(f"{where}.properties: not a map of schemas")
            if "strict" in value or "additionalProperties" in value:
                raise unchecked(f"{where}.properties: a property litellm would drop")
            out[key] = {k: _schema(v, f"{where}.properties.{k}") for k, v in value.items()}
        elif key == "items":
            if not isinstance(value, dict):
                raise unchecked(f"{where}.items: not a schema")
            out[key] = _schema(value, f"{where}.items")
        elif key == "enum":
            if isinstance(kind, str) and kind.lower() == "string" and isinstance(value, list):
                out[key] = [None if v == "" else v for v in value]
        elif key == "format":
            if value in ("enum", "date-time"):
                out[key] = value
        elif key in _SCHEMA_KEPT:
            out[key] = value
        else:
            raise unchecked(f"{where}.{key}")
    if isinstance(kind, str) and kind.lower() == "array" and not node.get("items"):
        out["items"] = {"type": "object"}
    if "type" not in out:
        out["type"] = "object"
    if "properties" in out:
        if "required" in out and out["required"] is None:
            del out["required"]
        if not out["properties"]:
            out.pop("properties")
            out.pop("required", None)
        out["type"] = "object"
    return out


def _tool_choice(choice: object) -> dict[str, Any]:
    named = {"auto": "AUTO", "required": "ANY", "none": "NONE"}
    if isinstance(choice, str) and choice in named:
        return {"functionCallingConfig": {"mode": named[choice]}}
    if isinstance(choice, dict):
        function = choice.get("function")
        name = function.get("name", "") if isinstance(function, dict) else ""
        if isinstance(name, str) and name:
            return {"functionCallingConfig": {"mode": "ANY", "allowed_function_names": [name]}}
    raise InvalidChatRequest(
        'tool_choice must be "auto", "required", "none" or '
        '{"type": "function", "function": {"name": ...}}',
        param="tool_choice",
    )


# -- the answer -------------------------------------------------------------------------------


def answer(data: object, model: str, created: int) -> dict[str, Any]:
    """A `GenerateContentResponse` as a `chat.completion`; ValueError when it is not one."""
    if not isinstance(data, dict):
        raise ValueError("not an object")
    candidates = data.get("candidates")
    feedback = data.get("promptFeedback")
    blocked = isinstance(feedback, dict) and "blockReason" in feedback
    if not blocked and not isinstance(candidates, list):
        raise ValueError("no candidates")
    out: dict[str, Any] = {
        "id": _str(data.get("responseId")) or f"chatcmpl-{uuid.uuid4()}",
        "object": "chat.completion",
        "created": created,
        "model": served_model(data) or model,
        "choices": [],
    }
    metadata = data.get("usageMetadata")
    usage = metadata if isinstance(metadata, dict) else {}
    first = candidates[0] if isinstance(candidates, list) and candidates else None
    reason = first.get("finishReason") if isinstance(first, dict) else None
    if blocked or (isinstance(reason, str) and reason in FLAGGED):
        filtered = {"role": "assistant", "content": None}
        out["choices"] = [{"index": 0, "message": filtered, "finish_reason": "content_filter"}]
        out["usage"] = {
            "prompt_tokens": _tokens(usage, "promptTokenCount"),
            "completion_tokens": _tokens(usage, "candidatesTokenCount"),
            "total_tokens": _tokens(usage, "totalTokenCount"),
        }
        return out
    calls = 0
    for index, candidate in enumerate(candidates if isinstance(candidates, list) else []):
        if not isinstance(candidate, dict) or not (
            "content" in candidate or "finishReason" in candidate
        ):
            continue
        delta, calls = read_candidate(candidate, calls)
        message: dict[str, Any] = {"role": "assistant", "content": None, **delta}
        for call in delta.get("tool_calls", []):
            del call["index"]  # a stream's field
        position = candidate.get("index", index)
        out["choices"].append(
            {
                "index": position if isinstance(position, int) else index,
                "message": message,
                "finish_reason": "tool_calls"
                if "tool_calls" in delta
                else finish(candidate.get("finishReason")),
            }
        )
    out["usage"] = usage_of(usage)
    return out


def read_candidate(candidate: Mapping[str, Any], calls: int) -> tuple[dict[str, Any], int]:
    """(a candidate's content as a message delta, the tool calls counted so far): text,
    reasoning (thought parts) and tool calls (ids as litellm makes them)."""
    content = candidate.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    delta: dict[str, Any] = {}
    if not isinstance(parts, list):
        return delta, calls
    text: list[str] = []
    thought: list[str] = []
    tool_calls: list[dict[str, Any]] = []
    for part in parts:
        if not isinstance(part, dict):
            continue
        value = part.get("text")
        if isinstance(value, str) and value:
            (thought if part.get("thought") is True else text).append(value)
        call = part.get("functionCall")
        if isinstance(call, dict):
            tool_calls.append(_tool_call(call, part.get("thoughtSignature"), calls))
            calls += 1
    if text:
        delta["content"] = "".join(text)
    if thought:
        delta["reasoning_content"] = "".join(thought)
    if tool_calls:
        delta["tool_calls"] = tool_calls
    return delta, calls


def _tool_call(call: Mapping[str, Any], signature: object, index: int) -> dict[str, Any]:
    native = call.get("id")
    call_id = native if isinstance(native, str) and native else f"call_{uuid.uuid4().hex[:28]}"
    if isinstance(signature, str) and signature:
        call_id = f"{call_id}{SIGNATURE_SEPARATOR}{signature}"
    arguments = json.dumps(call.get("args"), ensure_ascii=False)  # litellm's spacing
    function = {"name": call.get("name"), "arguments": arguments}
    return {"id": call_id, "type": "function", "function": function, "index": index}


def finish(reason: object) -> str:
    if not isinstance(reason, str) or not reason:
        return "stop"
    if reason in FILTERED:
        return "content_filter"
    return FINISH.get(reason, "stop")


def served_model(data: Mapping[str, Any]) -> str | None:
    """The model that answered (`modelVersion`, without an `@` version)."""
    version = data.get("modelVersion")
    return version.split("@", 1)[0] if isinstance(version, str) and version else None


def usage_of(usage: Mapping[str, Any]) -> dict[str, Any]:
    """Gemini's `usageMetadata` in OpenAI's terms, as litellm counts it: tool-use prompt
    tokens are prompt tokens, thoughts are completion tokens (added when Gemini's count
    leaves them out), cached tokens are `prompt_tokens_details.cached_tokens`."""
    prompt = _tokens(usage, "promptTokenCount")
    tool_use = _tokens(usage, "toolUsePromptTokenCount")
    candidates = _tokens(usage, "candidatesTokenCount")
    thoughts = _tokens(usage, "thoughtsTokenCount")
    total = _tokens(usage, "totalTokenCount")
    completion = candidates
    if thoughts and prompt + candidates + tool_use != total:
        completion += thoughts
    out: dict[str, Any] = {
        "prompt_tokens": prompt + tool_use,
        "completion_tokens": completion,
        "total_tokens": total,
    }
    cached = usage.get("cachedContentTokenCount")
    if isinstance(cached, int):
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    if "thoughtsTokenCount" in usage:
        out["completion_tokens_details"] = {"reasoning_tokens": thoughts}
    return out


def _tokens(usage: Mapping[str, Any], key: str) -> int:
    value = usage.get(key)
    return value if is_int(value) else 0


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


# -- the stream -------------------------------------------------------------------------------


class StreamEvents:
    """One stream's state: what each event (a whole `GenerateContentResponse`) becomes."""

    def __init__(self) -> None:
        self.id: str | None = None
        self.model: str | None = None
        self.usage: dict[str, Any] | None = None
        self.calls = 0
        """Tool calls so far (OpenAI numbers them across the stream)."""
        self.finished = False
        """A candidate gave its finish reason (or the prompt was blocked): the stream is
        complete; Gemini sends no other end event."""

    def openai_usage(self) -> dict[str, Any] | None:
        """The last usageMetadata in OpenAI's terms (None before any)."""
        return usage_of(self.usage) if self.usage is not None else None

    def delta(self, event: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
        """(the delta to send or None, the finish reason or None) for one event."""
        self.id = self.id or _str(event.get("responseId"))
        self.model = self.model or served_model(event)
        usage = event.get("usageMetadata")
        if isinstance(usage, dict):
            self.usage = usage
        feedback = event.get("promptFeedback")
        if isinstance(feedback, dict) and "blockReason" in feedback:
            self.finished = True
            return {}, "content_filter"
        candidates = event.get("candidates")
        candidate = candidates[0] if isinstance(candidates, list) and candidates else None
        if not isinstance(candidate, dict):
            return None, None
        delta, self.calls = read_candidate(candidate, self.calls)
        reason = candidate.get("finishReason")
        if reason is None:
            return (delta or None), None
        self.finished = True
        mapped = finish(reason)
        if "tool_calls" in delta or (self.calls and mapped == "stop"):
            mapped = "tool_calls"  # an end after tool calls (a filter or a cut stays one)
        return delta, mapped
