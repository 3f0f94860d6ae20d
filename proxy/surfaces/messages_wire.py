"""Anthropic's Messages API (`/v1/messages`) in chat terms: the request side, pure.

overspill's conversation core is OpenAI chat messages, so the Messages surface translates:
`read_request` validates a Messages body and writes its conversation as chat messages and its
parameters as chat parameters; every chat message remembers the Anthropic blocks it came from
(`Origin`), so a request sent on to an upstream that speaks the Messages API itself is written
again from the client's own blocks (thinking signatures, `cache_control`, documents kept) for
every message no layer replaced (messages_native.py).

    system (string or text blocks)          one system message (text joined)
    user: text, image, document, ...        one user message (text joined; parts if any image)
    user: tool_result blocks                one `tool` message each, before the user's own text
    assistant: text, tool_use               one assistant message: content + tool_calls
    assistant: thinking, redacted_thinking  dropped (counted: a chat upstream takes none)
    assistant: compaction                   everything before it gone, its summary a system
                                            message (the API's own rule for the block)
    system (a mid-conversation system turn) a system message where it stands

A message always becomes the same chat messages whatever its `cache_control` markers, so a
conversation's prefix chain holds from turn to turn while Claude Code moves them. A tool
result that reports an error starts with `[tool error]`, which the masking policy reads.

The wire format's truth is the Anthropic Python SDK's types (`anthropic.types.beta`:
BetaMessageParam, BetaContentBlockParam, MessageCreateParams); the tests validate what the
surface writes back with them. What only Anthropic runs (server tools and their blocks, files
by id, MCP servers, containers) is refused with a 400 naming it unless the deployment speaks
the Messages API itself (`native`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from kernel.errors import InvalidChatRequest, UnsupportedItem, UnsupportedTool
from kernel.json_values import is_int, is_number
from proxy.surfaces.responses_params import wrong

TOOL_ERROR = "[tool error] "
"""How a tool result that reports an error begins in chat terms (chat has no `is_error`)."""

USER_BLOCKS = frozenset({"text", "image", "document", "search_result", "tool_result"})
ASSISTANT_BLOCKS = frozenset({"text", "tool_use", "thinking", "redacted_thinking", "compaction"})
RESULT_BLOCKS = frozenset({"text", "image", "document", "search_result", "tool_reference"})
ANTHROPIC_BLOCKS = frozenset(
    {
        "server_tool_use", "web_search_tool_result", "web_fetch_tool_result",
        "code_execution_tool_result", "bash_code_execution_tool_result",
        "text_editor_code_execution_tool_result", "tool_search_tool_result", "mcp_tool_use",
        "mcp_tool_result", "container_upload",
    }
)  # fmt: skip
"""Blocks of what Anthropic runs itself (server tools, MCP, containers): only an upstream that
speaks the Messages API can take them."""
ANTHROPIC_FIELDS = {
    "mcp_servers": "MCP servers are called by Anthropic's API",
    "container": "containers are Anthropic's code execution",
}
"""Request fields only Anthropic's API serves, and why."""
TOOL_CHOICES = ("auto", "any", "tool", "none")
MIN_THINKING_BUDGET = 1024
"""The least `thinking.budget_tokens` Anthropic's API takes."""
ROLES = ("user", "assistant", "system")


@dataclass(frozen=True, slots=True)
class Origin:
    """The Anthropic blocks a chat message was written from."""

    role: str
    """`user`, `assistant`, `system` (a system turn among the messages), or `prompt` (the
    request's top-level `system`)."""
    blocks: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True, slots=True)
class Conversation:
    """A Messages request in chat terms."""

    messages: tuple[dict[str, Any], ...]
    origins: Mapping[int, Origin]
    """Each chat message's (by `id`) Anthropic blocks."""
    params: dict[str, Any]
    """The chat parameters (without model and messages)."""
    thinking: tuple[str, ...] = ()
    """The thinking of each assistant turn that had some: a chat upstream takes none
    (dropped)."""
    compacted: int = 0
    """Messages before the newest compaction block (replaced by its summary)."""
    deferred: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    """Tools loaded only when a tool search found them (`defer_loading`), by name."""


def read_request(body: Mapping[str, Any], *, native: bool) -> Conversation:
    """A Messages body (already a JSON object) checked and written in chat terms. `native`:
    the deployment speaks the Messages API itself, so what only Anthropic runs may pass.
    Raises InvalidChatRequest (UnsupportedItem, UnsupportedTool) naming the field's path."""
    max_tokens = body.get("max_tokens")
    if not is_int(max_tokens) or max_tokens < 1:
        raise wrong("max_tokens", max_tokens, "a positive integer (the answer's length cap)")
    if not native:
        for name, why in ANTHROPIC_FIELDS.items():
            if body.get(name) is not None:
                raise UnsupportedItem(
                    f"{name!r}: {why}; this model is reached through chat completions: remove "
                    "it, or send the request to an Anthropic deployment",
                    param=name,
                )
    tools, deferred = _tools(body.get("tools"), native)
    reader = _Reader(native, deferred)
    reader.system(body.get("system"))
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise wrong("messages", raw, "a non-empty array of messages")
    for index, message in enumerate(raw):
        reader.message(message, f"messages[{index}]")
    params = _params(body, tools, reader.loaded, deferred)
    return Conversation(
        tuple(reader.messages),
        reader.origins,
        params,
        tuple(reader.thinking),
        reader.compacted,
        deferred,
    )


class _Reader:
    """Writes one request's messages in chat terms, in order."""

    def __init__(self, native: bool, deferred: Mapping[str, dict[str, Any]]) -> None:
        self.native = native
        self.deferred = deferred
        self.messages: list[dict[str, Any]] = []
        self.origins: dict[int, Origin] = {}
        self.calls: set[str] = set()
        self.loaded: list[str] = []
        """Deferred tools a tool search loaded (`tool_reference` blocks), in order."""
        self.thinking: list[str] = []
        self.compacted = 0
        self._prompt: dict[str, Any] | None = None

    def add(self, message: dict[str, Any], role: str, blocks: Sequence[Mapping[str, Any]]) -> None:
        self.messages.append(message)
        self.origins[id(message)] = Origin(role, tuple(blocks))

    def system(self, value: Any) -> None:
        """The top-level `system`: a string or text blocks."""
        if value is None or value == "" or value == []:
            return
        if isinstance(value, str):
            blocks: list[Mapping[str, Any]] = [{"type": "text", "text": value}]
        elif isinstance(value, list):
            blocks = [_text_block(block, f"system[{i}]") for i, block in enumerate(value)]
        else:
            raise wrong("system", value, "a string or an array of text blocks")
        message = {"role": "system", "content": _joined(blocks)}
        self._prompt = message
        self.add(message, "prompt", blocks)

    def message(self, value: Any, where: str) -> None:
        if not isinstance(value, dict):
            raise wrong(where, value, "a message (an object with a role and content)")
        role = value.get("role")
        if role not in ROLES:
            raise wrong(f"{where}.role", role, "one of user, assistant, system", quote=True)
        blocks = _blocks(value.get("content"), f"{where}.content")
        if not blocks and role != "assistant":
            raise InvalidChatRequest(
                f"{where}.content is empty: every message but a final assistant one needs content",
                param=f"{where}.content",
            )
        if role == "user":
            self._user(blocks, where)
        elif role == "assistant":
            self._assistant(blocks, where)
        else:
            for index, block in enumerate(blocks):
                _text_block(block, f"{where}.content[{index}]")
            self.add({"role": "system", "content": _joined(blocks)}, "system", blocks)

    def _user(self, blocks: list[dict[str, Any]], where: str) -> None:
        own: list[tuple[dict[str, Any], str]] = []
        for index, block in enumerate(blocks):
            at = f"{where}.content[{index}]"
            kind = self._kind(block, at, USER_BLOCKS)
            if kind == "tool_result":
                self.add(self._tool_result(block, at), "user", [block])
            else:
                own.append((block, at))
        if own:
            parts = [self._part(block, at) for block, at in own]
            said = [block for block, _ in own]
            self.add({"role": "user", "content": _content(parts)}, "user", said)

    def _assistant(self, blocks: list[dict[str, Any]], where: str) -> None:
        start = 0
        for index in range(len(blocks) - 1, -1, -1):  # what a compaction block ends is gone
            block = blocks[index]
            if isinstance(block, dict) and block.get("type") == "compaction":
                self._compaction(block, f"{where}.content[{index}]")
                start = index + 1
                break
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        thinking: list[str] = []
        blocks = blocks[start:]
        for index, block in enumerate(blocks, start):
            at = f"{where}.content[{index}]"
            kind = self._kind(block, at, ASSISTANT_BLOCKS)
            if kind == "text":
                texts.append(_text_block(block, at)["text"])
            elif kind == "tool_use":
                calls.append(self._tool_use(block, at))
            elif kind == "thinking":
                _string(block, "thinking", at)
                _string(block, "signature", at)
                thinking.append(block["thinking"])
            elif kind == "redacted_thinking":
                _string(block, "data", at)
                thinking.append(block["data"])
            elif kind != "compaction":  # what Anthropic ran itself (native only), as text
                texts.append(_anthropic_text(block))
        if thinking:
            self.thinking.append("\n".join(thinking))
        if not texts and not calls:
            return  # nothing a chat upstream can take (thinking only, or empty)
        message: dict[str, Any] = {"role": "assistant", "content": "\n\n".join(texts) or None}
        if calls:
            message["tool_calls"] = calls
        self.add(message, "assistant", blocks)

    def _compaction(self, block: Mapping[str, Any], where: str) -> None:
        """A compaction block: what came before is its summary (a null summary: a no-op)."""
        content = block.get("content")
        if content is None:
            return
        if not isinstance(content, str) or not content:
            raise wrong(f"{where}.content", content, "the summary (a non-empty string) or null")
        kept = [self._prompt] if self._prompt is not None else []
        self.compacted += len(self.messages) - len(kept)
        self.messages[:] = kept
        self.origins = {id(m): self.origins[id(m)] for m in kept}
        summary = {"role": "system", "content": content}
        self.messages.append(summary)  # overspill's own: never the client's block again

    def _kind(self, block: Any, where: str, allowed: frozenset[str]) -> str:
        if not isinstance(block, dict):
            raise wrong(where, block, "a content block (an object with a type)")
        kind = block.get("type")
        if not isinstance(kind, str):
            raise wrong(f"{where}.type", kind, "a content block type (a string)")
        if kind in allowed:
            return kind
        if kind in ANTHROPIC_BLOCKS:
            if self.native:
                return kind
            raise UnsupportedItem(
                f"{where!r} is a {kind!r} block, which only Anthropic's API runs; this model is "
                "reached through chat completions: remove it, or send the request to an "
                "Anthropic deployment",
                param=f"{where}.type",
            )
        raise wrong(f"{where}.type", kind, "one of " + ", ".join(sorted(allowed)), quote=True)

    def _tool_use(self, block: Mapping[str, Any], where: str) -> dict[str, Any]:
        _string(block, "id", where)
        _string(block, "name", where)
        arguments = block.get("input")
        if not isinstance(arguments, dict):
            raise wrong(f"{where}.input", arguments, "the tool's input (an object)")
        self.calls.add(block["id"])
        function = {"name": block["name"], "arguments": _json(arguments)}
        return {"id": block["id"], "type": "function", "function": function}

    def _tool_result(self, block: Mapping[str, Any], where: str) -> dict[str, Any]:
        _string(block, "tool_use_id", where)
        call = block["tool_use_id"]
        if call not in self.calls:
            raise InvalidChatRequest(
                f"{where}.tool_use_id {call!r} answers no tool_use: an assistant message "
                "before it must hold a tool_use block with that id",
                param=f"{where}.tool_use_id",
            )
        error = block.get("is_error")
        if error is not None and not isinstance(error, bool):
            raise wrong(f"{where}.is_error", error, "true or false")
        content = block.get("content")
        if content is None:
            text = ""
        elif isinstance(content, str):
            text = content
        elif isinstance(content, list):
            text = "\n".join(self._result_text(part, f"{where}.content[{i}]")
                             for i, part in enumerate(content))  # fmt: skip
        else:
            raise wrong(f"{where}.content", content, "a string or an array of blocks")
        if error:
            text = TOOL_ERROR + text
        return {"role": "tool", "tool_call_id": call, "content": text}

    def _result_text(self, block: Any, where: str) -> str:
        kind = self._kind(block, where, RESULT_BLOCKS)
        if kind == "tool_reference":
            _string(block, "tool_name", where)
            name = block["tool_name"]
            if name in self.deferred and name not in self.loaded:
                self.loaded.append(name)
            return f"[tool loaded: {name}]"
        if kind == "image":
            _image_source(block, where, self.native)
            return "[image]"
        part = self._part(block, where)
        if part["type"] == "text":
            text: str = part["text"]
            return text
        return f"[{block.get('type')}]"

    def _part(self, block: Mapping[str, Any], where: str) -> dict[str, Any]:
        """A user's block as a chat content part."""
        kind = block.get("type")
        if kind == "text":
            return {"type": "text", "text": _text_block(block, where)["text"]}
        if kind == "image":
            return {
                "type": "image_url",
                "image_url": {"url": _image_source(block, where, self.native)},
            }
        if kind == "document":
            return _document(block, where, self.native)
        if kind == "search_result":
            return {"type": "text", "text": _search_result(block, where)}
        return {"type": "text", "text": _anthropic_text(block)}


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    """A message's content as blocks (a string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if isinstance(content, list):
        return content
    raise wrong(where, content, "a string or an array of content blocks")


def _text_block(block: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(block, dict) or block.get("type") != "text":
        raise wrong(where, block, "a text block ({'type': 'text', 'text': ...})")
    _string(block, "text", where)
    return block


def _joined(blocks: Sequence[Mapping[str, Any]]) -> str:
    return "\n\n".join(block["text"] for block in blocks)


def _content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """Chat content: the text when every part is text (joined), else the parts."""
    if all(part["type"] == "text" for part in parts):
        return "\n\n".join(part["text"] for part in parts)
    return parts


def _image_source(block: Mapping[str, Any], where: str, native: bool) -> str:
    """An image block's URL for chat: a `data:` URL of base64 data, or the image's URL."""
    source = _source(block, where, "an image source (type base64, url or file)")
    kind = source.get("type")
    if kind == "base64":
        _string(source, "media_type", f"{where}.source")
        _string(source, "data", f"{where}.source")
        return f"data:{source['media_type']};base64,{source['data']}"
    if kind == "url":
        _string(source, "url", f"{where}.source")
        url: str = source["url"]
        if not url.startswith(("https://", "http://")):
            raise wrong(f"{where}.source.url", url, "an http(s) URL", quote=True)
        return url
    if kind == "file" and native:
        return f"file:{source.get('file_id')}"
    if kind == "file":
        raise UnsupportedItem(
            f"{where}.source: a file by id is stored at Anthropic; send the image as base64 "
            "data or a URL",
            param=f"{where}.source",
        )
    raise wrong(f"{where}.source", source, "an image source (type base64, url or file)")


def _document(block: Mapping[str, Any], where: str, native: bool) -> dict[str, Any]:
    """A document block as a chat part: its text, or a PDF as a file part."""
    source = _source(block, where, "a document source (type text, content, base64)")
    kind = source.get("type")
    title = block.get("title")
    heading = f"Document: {title}\n" if isinstance(title, str) and title else ""
    if kind == "text":
        _string(source, "data", f"{where}.source")
        return {"type": "text", "text": heading + source["data"]}
    if kind == "content":
        inner = source.get("content")
        blocks = _blocks(inner, f"{where}.source.content")
        texts = [_text_block(b, f"{where}.source.content[{i}]")["text"]
                 for i, b in enumerate(blocks) if b.get("type") == "text"]  # fmt: skip
        return {"type": "text", "text": heading + "\n\n".join(texts)}
    if kind == "base64":
        _string(source, "data", f"{where}.source")
        media = source.get("media_type") or "application/pdf"
        file = {"file_data": f"data:{media};base64,{source['data']}"}
        if heading:
            file["filename"] = str(title)
        return {"type": "file", "file": file}
    if kind in ("url", "file") and native:
        return {
            "type": "text",
            "text": f"{heading}[document: {source.get(kind if kind == 'url' else 'file_id')}]",
        }
    if kind in ("url", "file"):
        raise UnsupportedItem(
            f"{where}.source: a document by {kind} is fetched by Anthropic's API; send its "
            "text (source type text) or its base64 data",
            param=f"{where}.source",
        )
    raise wrong(f"{where}.source", source, "a document source (type text, content, base64)")


def _source(block: Mapping[str, Any], where: str, expected: str) -> dict[str, Any]:
    source = block.get("source")
    if not isinstance(source, dict):
        raise wrong(f"{where}.source", source, expected)
    return source


def _search_result(block: Mapping[str, Any], where: str) -> str:
    _string(block, "source", where)
    title = block.get("title") if isinstance(block.get("title"), str) else ""
    content = block.get("content")
    blocks = content if isinstance(content, list) else []
    texts = [b["text"] for b in blocks if isinstance(b, dict) and isinstance(b.get("text"), str)]
    return "\n".join([f"Search result: {title} ({block['source']})", *texts])


def _anthropic_text(block: Mapping[str, Any]) -> str:
    """A block of what Anthropic ran itself, in a line the layers can keep."""
    kind = block.get("type")
    if kind in ("server_tool_use", "mcp_tool_use"):
        return f"[{kind} {block.get('name')}: {_json(block.get('input') or {})}]"
    return f"[{kind}]"


# -- tools and parameters ---------------------------------------------------------------------


def _tools(value: Any, native: bool) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """(the chat tools, the deferred ones by name): a custom tool is a function; a tool only
    Anthropic defines or runs is refused unless `native` (and left out of the chat tools)."""
    if value is None:
        return [], {}
    if not isinstance(value, list):
        raise wrong("tools", value, "an array of tools")
    tools: list[dict[str, Any]] = []
    deferred: dict[str, dict[str, Any]] = {}
    for index, tool in enumerate(value):
        where = f"tools[{index}]"
        if not isinstance(tool, dict):
            raise wrong(where, tool, "a tool (an object with a name)")
        kind = tool.get("type")
        if kind not in (None, "custom"):
            if native:
                continue
            raise UnsupportedTool(
                f"{where!r} is Anthropic's {kind!r} tool, which only Anthropic's API defines "
                "or runs; this model is reached through chat completions: remove it, or give "
                "the tool as a custom tool (name, description, input_schema)",
                param=where,
            )
        _string(tool, "name", where)
        schema = tool.get("input_schema")
        if not isinstance(schema, dict):
            raise wrong(f"{where}.input_schema", schema, "a JSON schema (an object)")
        description = tool.get("description")
        if description is not None and not isinstance(description, str):
            raise wrong(f"{where}.description", description, "a string")
        function: dict[str, Any] = {"name": tool["name"], "parameters": schema}
        if description:
            function["description"] = description
        chat = {"type": "function", "function": function}
        if tool.get("defer_loading") is True:
            deferred[tool["name"]] = chat
        else:
            tools.append(chat)
    return tools, deferred


SAMPLING: dict[str, tuple[Callable[[Any], bool], str]] = {
    "temperature": (lambda v: is_number(v) and 0 <= v <= 1, "a number from 0 to 1"),
    "top_p": (lambda v: is_number(v) and 0 <= v <= 1, "a number from 0 to 1"),
    "top_k": (lambda v: is_int(v) and v >= 0, "a whole number, 0 or more"),
}
"""Anthropic's sampling fields and the values its API takes (refused as it refuses them)."""


def _params(
    body: Mapping[str, Any],
    tools: list[dict[str, Any]],
    loaded: Sequence[str],
    deferred: Mapping[str, dict[str, Any]],
) -> dict[str, Any]:
    """The chat parameters of a Messages body."""
    params: dict[str, Any] = {"max_tokens": body["max_tokens"]}
    for name, (check, expected) in SAMPLING.items():
        value = body.get(name)
        if value is not None:
            if not check(value):
                raise wrong(name, value, expected)
            params[name] = value
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise wrong("stop_sequences", stops, "an array of strings")
        if stops:
            params["stop"] = stops
    metadata = body.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise wrong("metadata", metadata, "an object")
    _thinking(body.get("thinking"))
    chat_tools = [*tools, *(deferred[name] for name in loaded)]
    choice = _tool_choice(body.get("tool_choice"))
    if chat_tools:
        params["tools"] = chat_tools
        if choice is not None:
            params["tool_choice"], parallel = choice
            if parallel is False:
                params["parallel_tool_calls"] = False
    params.update(_output_format(body))
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise wrong("stream", stream, "true or false")
    if stream:
        params["stream"] = True
        params["stream_options"] = {"include_usage": True}
    return params


def _thinking(value: Any) -> None:
    """Checks `thinking` as Anthropic's API does (an object with a `type`; `enabled` with a
    `budget_tokens` of at least `MIN_THINKING_BUDGET`), so a request a chat upstream would
    serve without thinking is not one Anthropic refuses. Not passed on: no chat upstream
    takes it. A type newer than this list passes (the Messages API adds them)."""
    if value is None:
        return
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise wrong("thinking", value, "an object whose type is enabled, adaptive or disabled")
    budget = value.get("budget_tokens")
    if value["type"] == "enabled" and not (is_int(budget) and budget >= MIN_THINKING_BUDGET):
        raise wrong(
            "thinking.budget_tokens", budget, f"an integer of at least {MIN_THINKING_BUDGET}"
        )


def _tool_choice(choice: Any) -> tuple[Any, bool | None] | None:
    """(chat's tool_choice, False when parallel calls are disabled), or None when not given."""
    if choice is None:
        return None
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind not in TOOL_CHOICES:
        raise wrong("tool_choice", choice, "an object whose type is auto, any, tool or none")
    disabled = choice.get("disable_parallel_tool_use")
    parallel = False if disabled is True else None
    if kind == "tool":
        _string(choice, "name", "tool_choice")
        return {"type": "function", "function": {"name": choice["name"]}}, parallel
    return {"auto": "auto", "any": "required", "none": "none"}[kind], parallel


def _output_format(body: Mapping[str, Any]) -> dict[str, Any]:
    """Structured output (`output_format` or `output_config.format`) as `response_format`."""
    config = body.get("output_config")
    fmt = body.get("output_format")
    if fmt is None and isinstance(config, dict):
        fmt = config.get("format")
    if fmt is None:
        return {}
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        raise wrong("output_format", fmt, "an object whose type is json_schema")
    schema = fmt.get("schema")
    if not isinstance(schema, dict):
        raise wrong("output_format.schema", schema, "a JSON schema (an object)")
    return {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": schema, "strict": True},
        }
    }


# -- small checks -----------------------------------------------------------------------------


def _string(holder: Mapping[str, Any], name: str, where: str) -> None:
    if not isinstance(holder.get(name), str):
        raise wrong(f"{where}.{name}", holder.get(name), "a string")


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()
