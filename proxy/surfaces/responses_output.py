"""The Responses API's answer, written from a chat completion: the response object.

Pure (no I/O): `response_shell` is the response before its output (the request's fields echoed
with the API's defaults), and `from_chat` turns a whole `chat.completion` into the finished
response. Its output items, status and usage are written by the functions here, which the
stream (responses_events.py) uses too, so a streamed answer ends with the object the JSON path
returns (ids aside).

The shapes are those of the OpenAI Python SDK's types (`openai.types.responses`: Response,
ResponseOutputMessage, ResponseReasoningItem, ResponseFunctionToolCall, ResponseUsage); the
tests validate every object with them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from kernel.json_values import is_int

INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}
"""A chat `finish_reason` that ends a response as incomplete → `incomplete_details.reason`."""


def new_id(prefix: str) -> str:
    """An id like OpenAI's: `resp_`, `msg_`, `fc_`, `rs_`, `call_` + 48 random hex digits
    (`prefix` with or without its underscore)."""
    return f"{prefix.rstrip('_')}_{os.urandom(24).hex()}"


def response_shell(
    body: Mapping[str, Any], *, response_id: str, created_at: int, previous_response_id: str | None
) -> dict[str, Any]:
    """The response object before its output: the request's echo fields with the API's
    defaults (run `chat_params` on the body first: it checks the fields echoed here)."""
    reasoning = body.get("reasoning") or {}
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": "in_progress",
        "model": body.get("model"),
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "metadata": body.get("metadata") or {},
        "parallel_tool_calls": _given(body, "parallel_tool_calls", True),
        "previous_response_id": previous_response_id,
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        "store": _given(body, "store", True),
        "temperature": _given(body, "temperature", 1.0),
        "text": _given(body, "text", {"format": {"type": "text"}}),
        "tool_choice": _given(body, "tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_p": _given(body, "top_p", 1.0),
        "truncation": _given(body, "truncation", "disabled"),
        "user": body.get("user"),
        "error": None,
        "incomplete_details": None,
        "output": [],
        "usage": None,
    }


def _given(body: Mapping[str, Any], name: str, default: Any) -> Any:
    value = body.get(name)
    return default if value is None else value


def from_chat(completion: Mapping[str, Any], shell: Mapping[str, Any]) -> dict[str, Any]:
    """A whole chat.completion → the finished response: a reasoning item, the message, the
    function calls (in that order), status and usage in the Responses API's terms."""
    choices = completion.get("choices") or [{}]
    choice = choices[0]
    message = choice.get("message") or {}
    status, details = ending(choice.get("finish_reason"))
    output: list[dict[str, Any]] = []
    reasoning = reasoning_of(message)
    if reasoning:
        output.append(reasoning_item(new_id("rs"), reasoning))
    text, refusal = _text_of(message.get("content")), message.get("refusal")
    calls = message.get("tool_calls") or []
    if text or refusal or not calls:
        parts = [text_part(text, token_logprobs(choice))] if text or not refusal else []
        if refusal:
            parts.append({"type": "refusal", "refusal": refusal})
        output.append(message_item(new_id("msg"), parts))
    for call in calls:
        function = call.get("function") or {}
        output.append(call_item(new_id("fc"), call.get("id") or new_id("call"), function))
    if status == "incomplete":
        output[-1]["status"] = "incomplete"
    return finished(shell, status, details, output, completion.get("usage"))


def finished(
    shell: Mapping[str, Any],
    status: str,
    details: dict[str, str] | None,
    output: list[dict[str, Any]],
    usage: Any,
) -> dict[str, Any]:
    """The shell with its output, final status and usage."""
    return {
        **shell,
        "status": status,
        "incomplete_details": details,
        "output": output,
        "usage": usage_of(usage),
    }


def ending(finish_reason: Any) -> tuple[str, dict[str, str] | None]:
    """A chat `finish_reason` → the response's status and `incomplete_details`."""
    reason = INCOMPLETE.get(finish_reason) if isinstance(finish_reason, str) else None
    return ("completed", None) if reason is None else ("incomplete", {"reason": reason})


def usage_of(usage: Any) -> dict[str, Any] | None:
    """Chat usage → ResponseUsage (None when the upstream sent none)."""
    if not isinstance(usage, dict):
        return None
    prompt, completion = _count(usage, "prompt_tokens"), _count(usage, "completion_tokens")
    return {
        "input_tokens": prompt,
        "input_tokens_details": {
            "cached_tokens": _count(usage.get("prompt_tokens_details"), "cached_tokens"),
            "cache_write_tokens": 0,
        },
        "output_tokens": completion,
        "output_tokens_details": {
            "reasoning_tokens": _count(usage.get("completion_tokens_details"), "reasoning_tokens")
        },
        "total_tokens": _count(usage, "total_tokens") or prompt + completion,
    }


def _count(holder: Any, name: str) -> int:
    value = holder.get(name) if isinstance(holder, dict) else None
    return value if is_int(value) else 0


def reasoning_of(delta: Mapping[str, Any]) -> str:
    """A message's (or delta's) reasoning text: `reasoning_content` (llama-server, DeepSeek,
    litellm) or `reasoning` (vLLM, Ollama)."""
    text = delta.get("reasoning_content")
    if not isinstance(text, str):
        text = delta.get("reasoning")
    return text if isinstance(text, str) else ""


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # some servers answer with text parts
        return "".join(p["text"] for p in content if isinstance(p, dict) and "text" in p)
    return ""


def token_logprobs(choice: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A chat choice's `logprobs.content` in the Responses API's form (bytes always a list)."""
    logprobs = choice.get("logprobs")
    entries = logprobs.get("content") if isinstance(logprobs, dict) else None
    return [_logprob(entry) for entry in entries or ()]


def _logprob(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "token": entry.get("token"),
        "bytes": entry.get("bytes") or [],
        "logprob": entry.get("logprob"),
        "top_logprobs": [
            {"token": t.get("token"), "bytes": t.get("bytes") or [], "logprob": t.get("logprob")}
            for t in entry.get("top_logprobs") or ()
        ],
    }


def text_part(text: str, logprobs: list[dict[str, Any]]) -> dict[str, Any]:
    """An output_text content part."""
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs}


def message_item(
    item_id: str, content: list[dict[str, Any]], status: str = "completed"
) -> dict[str, Any]:
    """An assistant message output item."""
    return {
        "id": item_id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": content,
    }


def reasoning_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    """A reasoning output item: the model's reasoning text as its content, no summary."""
    content = [{"type": "reasoning_text", "text": text}] if text else []
    return {"id": item_id, "type": "reasoning", "summary": [], "content": content, "status": status}


def call_item(
    item_id: str, call_id: str, function: Mapping[str, Any], status: str = "completed"
) -> dict[str, Any]:
    """A function_call output item."""
    return {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": function.get("name") or "",
        "arguments": function.get("arguments") or "",
    }
