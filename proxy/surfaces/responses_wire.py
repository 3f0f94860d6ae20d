"""The OpenAI Responses API (`/v1/responses`) in chat terms: the request side, pure.

overspill's conversation core is OpenAI chat messages (kernel/types.py's ChatRequest), so the
Responses surface translates: `check_input` validates and normalises a request's `input`,
`to_messages` turns its items into chat messages and `to_items` chat messages back into items.
The request's other fields are responses_params.py's (`chat_params`), the answer
responses_output.py's (`response_shell`, `from_chat`, `new_id`) and responses_events.py's
(`EventWriter`, `sse_event`); all are re-exported here, so the surface imports the translation
from one module.

The wire format's truth is the OpenAI Python SDK's types (`openai.types.responses`:
ResponseInputItemParam and its members, ResponseCreateParams); the tests validate what is
written here with them. What only OpenAI runs (built-in tools, their calls and outputs, item
references) is refused with a 400 that names it: a model reached through chat completions
cannot run it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kernel.errors import InvalidChatRequest, UnsupportedItem
from proxy.surfaces.responses_events import EventWriter, sse_event
from proxy.surfaces.responses_output import (
    call_item,
    from_chat,
    message_item,
    new_id,
    response_shell,
    text_part,
)
from proxy.surfaces.responses_params import chat_params, check_strings, wrong

__all__ = [  # the answer side and the parameters, importable from here as well
    "EventWriter",
    "chat_params",
    "check_input",
    "from_chat",
    "new_id",
    "response_shell",
    "sse_event",
    "to_items",
    "to_messages",
]

OPENAI_ITEMS = frozenset(
    {
        "file_search_call", "computer_call", "computer_call_output", "web_search_call",
        "tool_search_call", "tool_search_output", "additional_tools", "image_generation_call",
        "code_interpreter_call", "local_shell_call", "local_shell_call_output", "shell_call",
        "shell_call_output", "apply_patch_call", "apply_patch_call_output", "mcp_list_tools",
        "mcp_approval_request", "mcp_approval_response", "mcp_call", "custom_tool_call",
        "custom_tool_call_output", "compaction_trigger", "item_reference", "program",
        "program_output",
    }
)  # fmt: skip
"""Item types only an upstream serving the Responses API runs (the SDK's input item union)."""

USER_PARTS = {
    "input_text": (("text",), ()),
    "input_image": ((), ("image_url", "file_id")),
    "input_file": ((), ("file_id", "file_data", "file_url")),
}
"""A user, system or developer message's content part types: (required strings, at least one
of these strings)."""

ASSISTANT_PARTS = {
    "output_text": (("text",), ()),
    "refusal": (("refusal",), ()),
    "input_text": (("text",), ()),  # the SDK's EasyInputMessage allows it for any role
}
"""An assistant message's content part types."""

ITEM_STRINGS: dict[str, tuple[str, ...]] = {
    "message": (),
    "function_call": ("call_id", "name", "arguments"),
    "function_call_output": ("call_id",),
    "compaction": ("encrypted_content",),
    "reasoning": (),
}
"""The item types translated to chat messages, and the string fields each must carry (a
reasoning item is dropped: chat has no place for it)."""

IMAGE_DETAILS = ("low", "high", "auto", "original")
IMAGE_URL_STARTS = ("https://", "http://", "data:")
"""An `input_image`'s `image_url`: "a fully qualified URL or base64 encoded image in a data
URL" (OpenAI's API reference)."""

TEXT_PARTS = {
    "user": ("input_text",),
    "system": ("input_text",),
    "developer": ("input_text",),
    "assistant": ("output_text", "input_text"),
}
"""The text part types of a message, by its role (the quick check's)."""

QUICK_STRINGS = {
    "function_call": ("call_id", "name", "arguments"),
    "function_call_output": ("call_id", "output"),
}
"""The string fields of the items the quick check knows besides messages."""


def check_input(value: Any, where: str = "input") -> tuple[dict[str, Any], ...]:
    """A Responses `input` (a string, or an array of items) validated and normalised: a string
    becomes one user message item; every item gets its explicit `type`; content strings stay
    strings. Raises InvalidChatRequest whose `param` is the path (`input[3].content[0].type`)."""
    if isinstance(value, str):
        return ({"type": "message", "role": "user", "content": value},)
    if not isinstance(value, list):
        raise wrong(where, value, "a string or an array of input items")
    return tuple(
        _quick(item) or _check_item(item, f"{where}[{index}]") for index, item in enumerate(value)
    )


def _quick(item: Any) -> dict[str, Any] | None:
    """The usual item, checked without building its path: a message whose content is a string
    or text parts, a function call, a string output (None: the full check decides)."""
    if type(item) is not dict:
        return None
    kind = item.get("type")
    if kind is None or kind == "message":
        role = item.get("role")
        texts = TEXT_PARTS.get(role) if type(role) is str else None
        if texts is None or not _text_content(item.get("content"), texts):
            return None
        return item if kind else {**item, "type": "message"}
    names = QUICK_STRINGS.get(kind) if type(kind) is str else None
    if names is None or not all(type(item.get(name)) is str for name in names):
        return None
    return item


def _text_content(content: Any, texts: tuple[str, ...]) -> bool:
    if type(content) is str:
        return True
    return type(content) is list and all(
        type(part) is dict and part.get("type") in texts and type(part.get("text")) is str
        for part in content
    )


def _check_item(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise wrong(where, value, "an input item (an object)")
    item: dict[str, Any] = value
    kind = item.get("type")
    if kind is None:  # an easy message has no type; nor may an item reference (the SDK's)
        kind = "message" if "role" in item else "item_reference" if "id" in item else None
        if kind is None:
            raise InvalidChatRequest(
                f"{where!r} needs a 'type' ({_known_items()}) or, for a message, a 'role'",
                param=f"{where}.type",
            )
        item = {**item, "type": kind}
    if not isinstance(kind, str) or (kind not in ITEM_STRINGS and kind not in OPENAI_ITEMS):
        raise wrong(f"{where}.type", kind, _known_items(), quote=True)
    if kind == "message":
        _check_message(item, where)
    elif kind in ITEM_STRINGS:
        check_strings(item, where, ITEM_STRINGS[kind])
        _check_item_fields(kind, item, where)
    return item


def _check_message(item: Mapping[str, Any], where: str) -> None:
    role = item.get("role")
    if role not in ("user", "assistant", "system", "developer"):
        expected = "one of user, assistant, system, developer"
        raise wrong(f"{where}.role", role, expected, quote=True)
    content = item.get("content")
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise wrong(f"{where}.content", content, "a string or an array of content parts")
    _check_parts(
        content, f"{where}.content", ASSISTANT_PARTS if role == "assistant" else USER_PARTS
    )


def _check_parts(
    parts: list[Any], where: str, kinds: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]]
) -> None:
    for index, part in enumerate(parts):
        at = f"{where}[{index}]"
        if not isinstance(part, dict):
            raise wrong(at, part, "a content part (an object)")
        kind = part.get("type")
        if not isinstance(kind, str) or kind not in kinds:
            raise wrong(f"{at}.type", kind, "one of " + ", ".join(kinds), quote=True)
        check_strings(part, at, *kinds[kind])
        if kind != "input_image":
            continue
        url = part.get("image_url")
        if url is not None and not url.startswith(IMAGE_URL_STARTS):
            raise wrong(f"{at}.image_url", url, "an http(s) URL or a data: URL", quote=True)
        detail = part.get("detail")
        if detail is not None and detail not in IMAGE_DETAILS:
            raise wrong(f"{at}.detail", detail, "one of " + ", ".join(IMAGE_DETAILS), quote=True)


def _check_item_fields(kind: str, item: Mapping[str, Any], where: str) -> None:
    if kind == "function_call_output":
        output = item.get("output")
        if not isinstance(output, str):
            if not isinstance(output, list):
                raise wrong(f"{where}.output", output, "a string or an array of content parts")
            _check_parts(output, f"{where}.output", USER_PARTS)
    elif kind == "reasoning":
        for name in ("summary", "content"):
            if item.get(name) is not None and not isinstance(item[name], list):
                raise wrong(f"{where}.{name}", item[name], "an array")


def _known_items() -> str:
    return "one of " + ", ".join((*ITEM_STRINGS, *sorted(OPENAI_ITEMS)))


def to_messages(
    items: Sequence[Mapping[str, Any]],
    instructions: str | None = None,
    *,
    read_compaction: Callable[[Mapping[str, Any]], str | None] = lambda item: None,
    origins: list[int] | None = None,
) -> list[dict[str, Any]]:
    """Normalised items (check_input's) → chat messages (with `origins`, the index of the
    item each message starts at is appended to it, -1 for the instructions'). `instructions`
    first as a system message; a message item as a chat message (developer as system: many
    chat servers refuse it; input_text, input_image and input_file as text, image_url and
    file parts, one text part as plain text; an assistant's output_text and refusal parts as
    its text); function calls join the assistant message before them as its tool_calls (or
    start one with content None); a function_call_output is a tool message (its parts as
    text), answering an earlier call or refused; a compaction item is a system message of
    the text `read_compaction` finds for it, refused when it finds none (another server's);
    reasoning items are dropped (chat has no place for them); an item only OpenAI runs is
    refused (UnsupportedItem naming its type)."""
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    if origins is not None:
        origins += [-1] * len(messages)
    calls: set[str] = set()
    for index, item in enumerate(items):  # an item's path is written only for an error
        if origins is not None and len(origins) < len(messages):
            origins.append(index - 1)  # the message the previous item started
        kind = item.get("type")
        if kind == "message":
            messages.append(_message(item, index))
        elif kind == "function_call":
            _join_call(messages, item)
            calls.add(item["call_id"])
        elif kind == "function_call_output":
            messages.append(_tool_message(item, calls, index))
        elif kind == "compaction":
            messages.append(_compaction(item, read_compaction, index))
        elif kind != "reasoning":
            where = f"input[{index}]"
            raise UnsupportedItem(
                f"{where!r} is a {kind!r} item, which needs an upstream that runs it (OpenAI's "
                "Responses API); this model is reached through chat completions: remove the "
                "item, or send it to a model served by OpenAI's Responses API",
                param=where,
            )
    if origins is not None and len(origins) < len(messages):
        origins.append(len(items) - 1)
    return messages


def _message(item: Mapping[str, Any], index: int) -> dict[str, Any]:
    role, content = item["role"], item["content"]
    if role == "assistant":
        return {"role": "assistant", "content": _assistant_content(content)}
    role = "system" if role == "developer" else role  # many chat servers refuse `developer`
    if isinstance(content, str):
        return {"role": role, "content": content}
    parts = [_chat_part(part, index, place) for place, part in enumerate(content)]
    return {"role": role, "content": _plain(parts)}


def _chat_part(part: Mapping[str, Any], index: int, place: int) -> dict[str, Any]:
    kind = part["type"]
    if kind == "input_text":
        return {"type": "text", "text": part["text"]}
    if kind == "input_image" and part.get("image_url") is not None:
        image = {"url": part["image_url"], "detail": part.get("detail") or "auto"}
        return {"type": "image_url", "image_url": image}
    if part.get("file_id") is None and part.get("file_data") is None:  # only a file_url
        where = f"input[{index}].content[{place}]"
        raise UnsupportedItem(
            f"{where}.file_url: a file by URL needs an upstream that fetches it (OpenAI's "
            "Responses API); send its content as file_data, or its file_id",
            param=f"{where}.file_url",
        )
    names = ("file_id", "file_data", "filename")
    return {"type": "file", "file": {name: part[name] for name in names if part.get(name)}}


def _plain(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """Content parts, or the text itself when they are one text part ("" when none)."""
    if not parts:
        return ""
    if len(parts) == 1 and parts[0]["type"] == "text":
        text: str = parts[0]["text"]
        return text
    return parts


def _assistant_content(content: str | list[Mapping[str, Any]]) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    if len(content) == 1 and content[0]["type"] != "refusal":  # the usual: one output_text
        text: str = content[0]["text"]
        return text
    return _plain(
        [{"type": "text", "text": part.get("text", part.get("refusal"))} for part in content]
    )


def _join_call(messages: list[dict[str, Any]], item: Mapping[str, Any]) -> None:
    """A function_call joins the assistant message just before it, or starts one."""
    function = {"name": item["name"], "arguments": item["arguments"]}
    call = {"id": item["call_id"], "type": "function", "function": function}
    if messages and messages[-1]["role"] == "assistant":
        messages[-1].setdefault("tool_calls", []).append(call)
    else:
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _tool_message(item: Mapping[str, Any], calls: set[str], index: int) -> dict[str, Any]:
    call_id, output = item["call_id"], item["output"]
    if call_id not in calls:
        where = f"input[{index}]"
        raise InvalidChatRequest(
            f"{where!r} answers call_id {call_id!r}, but no function_call before it has that "
            "call_id: send the function_call item before its output (or continue the response "
            "that made the call with previous_response_id)",
            param=f"{where}.call_id",
        )
    text = output if isinstance(output, str) else "\n".join(map(_part_text, output))
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def _part_text(part: Mapping[str, Any]) -> str:
    """A tool output's content part as text (a chat tool message carries text only)."""
    if part["type"] == "input_text":
        text: str = part["text"]
        return text
    if part["type"] == "input_image":
        url = part.get("image_url") or part.get("file_id") or ""
        return "[image]" if url.startswith("data:") else f"[image: {url}]"
    name = part.get("filename") or part.get("file_id") or part.get("file_url")
    return f"[file: {name}]" if name else "[file]"


def _compaction(
    item: Mapping[str, Any], read: Callable[[Mapping[str, Any]], str | None], index: int
) -> dict[str, Any]:
    text = read(item)
    if text is None:
        where = f"input[{index}]"
        raise InvalidChatRequest(
            f"{where!r} is a compaction item overspill did not make (another server's "
            "encrypted summary), which it cannot read: send the conversation's items instead",
            param=where,
        )
    return {"role": "system", "content": text}


def to_items(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages → Responses input items: system, developer and user messages as message
    items, an assistant's text as a message with output_text (and its calls as function_call
    items, each with an id and status completed, as a response's output has), a tool message as
    a function_call_output."""
    items: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            items.extend(_assistant_items(message))
        elif role == "tool":
            output = _input_content(message.get("content"))
            call_id = message.get("tool_call_id")
            items.append({"type": "function_call_output", "call_id": call_id, "output": output})
        elif role in ("system", "developer", "user"):
            content = _input_content(message.get("content"))
            items.append({"type": "message", "role": role, "content": content})
        else:
            raise InvalidChatRequest(f"a chat message with role {role!r} has no Responses form")
    return items


def _input_content(content: Any) -> str | list[Any]:
    """Chat content as Responses content: a string as it is, parts as input parts."""
    if isinstance(content, str):
        return content
    return [_input_part(part) for part in content or ()]


def _input_part(part: Any) -> Any:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "text":
        return {"type": "input_text", "text": part.get("text")}
    if kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        detail = (image.get("detail") if isinstance(image, dict) else None) or "auto"
        return {"type": "input_image", "image_url": url, "detail": detail}
    if kind == "file" and isinstance(part.get("file"), dict):
        return {"type": "input_file", **part["file"]}
    return part  # what the Responses API has no part for passes as it is


def _assistant_items(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    content, refusal = message.get("content"), message.get("refusal")
    calls = message.get("tool_calls") or ()
    items: list[dict[str, Any]] = []
    if content is not None or refusal or not calls:
        texts = [content] if isinstance(content, str) else content or ()
        parts = [_output_part(part) for part in texts]
        if refusal:
            parts.append({"type": "refusal", "refusal": refusal})
        items.append(message_item(new_id("msg"), parts))
    for call in calls:
        items.append(call_item(new_id("fc"), call.get("id"), call.get("function") or {}))
    return items


def _output_part(part: Any) -> dict[str, Any]:
    if isinstance(part, str):
        return text_part(part, [])
    if part.get("type") == "refusal":
        return {"type": "refusal", "refusal": part.get("refusal")}
    return text_part(part.get("text"), [])
