"""A Responses API request's parameters as chat completion parameters, checked.

`chat_params` checks a `/v1/responses` body's fields (the SDK's `ResponseCreateParams`) and
writes those a chat completion has: `max_output_tokens` as `max_tokens`, function tools in
chat's form, `text.format` as `response_format`, ... A tool or tool_choice only OpenAI runs is
refused (UnsupportedTool), an ill-typed field too (InvalidChatRequest naming it). It also checks
the fields the response echoes (responses_output.py's `response_shell`), so an echo is always
one the SDK's `Response` reads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kernel.errors import InvalidChatRequest, UnsupportedTool
from kernel.json_values import is_int, is_number
from proxy.http import field_problem

EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
SUMMARIES = ("auto", "concise", "detailed")
VERBOSITIES = ("low", "medium", "high")
TOOL_CHOICES = ("auto", "none", "required")

RENAMED = (
    ("max_output_tokens", "max_tokens"),
    ("temperature", "temperature"),
    ("top_p", "top_p"),
    ("user", "user"),
)
"""Fields a chat completion has under the same or another name."""

FUNCTION_FIELDS = (("description", str, "a string"), ("parameters", dict, "an object"),
                   ("strict", bool, "true or false"))  # fmt: skip
"""A function tool's optional fields, as chat's `function` has them."""


def chat_params(body: Mapping[str, Any]) -> dict[str, Any]:
    """A Responses request's parameters as chat completion parameters. Also checks the fields
    the response echoes (metadata, store, truncation, ...), which produce nothing here, as do
    the fields that are overspill's or describe only the response."""
    for name in ("store", "instructions", "previous_response_id", "truncation", "metadata",
                 "include"):  # fmt: skip
        _checked(body, name)
    params = {chat: _checked(body, name) for name, chat in RENAMED if body.get(name) is not None}
    tools = _chat_tools(body.get("tools"))
    choice = None if body.get("tool_choice") is None else _tool_choice(body["tool_choice"])
    parallel = _checked(body, "parallel_tool_calls")
    if tools:  # chat servers refuse tool_choice and parallel_tool_calls without tools
        params["tools"] = tools
        if choice is not None:
            params["tool_choice"] = choice
        if parallel is not None:
            params["parallel_tool_calls"] = parallel
    params.update(_text_params(body.get("text")))
    params.update(_reasoning_params(body.get("reasoning")))
    params.update(_logprob_params(body))
    if _checked(body, "stream"):
        params["stream"] = True
        params["stream_options"] = {"include_usage": True}
    return params


CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "max_output_tokens": (lambda v: is_int(v) and v > 0, "a positive integer"),
    "temperature": (lambda v: is_number(v) and 0 <= v <= 2, "a number from 0 to 2"),
    "top_p": (lambda v: is_number(v) and 0 <= v <= 1, "a number from 0 to 1"),
    "user": (lambda v: isinstance(v, str), "a string"),
    "parallel_tool_calls": (lambda v: isinstance(v, bool), "true or false"),
    "stream": (lambda v: isinstance(v, bool), "true or false"),
    "store": (lambda v: isinstance(v, bool), "true or false"),
    "instructions": (lambda v: isinstance(v, str), "a string"),
    "previous_response_id": (lambda v: isinstance(v, str), "a string"),
    "truncation": (lambda v: v in ("auto", "disabled"), "'auto' or 'disabled'"),
    "top_logprobs": (lambda v: is_int(v) and 0 <= v <= 20, "an integer from 0 to 20"),
    "metadata": (
        lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()),
        "an object of strings",
    ),
    "include": (
        lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
        "an array of strings (what to include: 'message.output_text.logprobs', ...)",
    ),
}
"""What each plain field must be (null is always allowed: the API's default)."""


def _checked(body: Mapping[str, Any], name: str) -> Any:
    """The field's value (None when absent), refused when ill-typed."""
    value = body.get(name)
    check, expected = CHECKS[name]
    if value is not None and not check(value):
        raise wrong(name, value, expected)
    return value


def _chat_tools(tools: Any) -> list[dict[str, Any]]:
    """Function tools in chat's form; any other tool refused (only OpenAI runs it)."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise wrong("tools", tools, "an array of tools")
    return [_chat_tool(tool, f"tools[{index}]") for index, tool in enumerate(tools)]


def _chat_tool(tool: Any, where: str) -> dict[str, Any]:
    if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
        raise wrong(where, tool, "a tool (an object with a 'type')")
    if tool["type"] != "function":
        raise UnsupportedTool(
            f"{where!r} is a {tool['type']!r} tool, which only OpenAI's Responses API runs; "
            "this model is reached through chat completions, which calls function tools only: "
            "remove it, or send it to a model served by OpenAI's Responses API",
            param=where,
        )
    check_strings(tool, where, ("name",))
    function = {"name": tool["name"]}
    for name, check, expected in FUNCTION_FIELDS:
        if tool.get(name) is not None:
            if not isinstance(tool[name], check):
                raise wrong(f"{where}.{name}", tool[name], expected)
            function[name] = tool[name]
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, str) and choice in TOOL_CHOICES:
        return choice
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    if isinstance(kind, str) and kind != "function":
        raise UnsupportedTool(
            f"tool_choice {kind!r} is OpenAI's Responses API's own; this model is reached "
            "through chat completions: use 'auto', 'none', 'required' or "
            "{'type': 'function', 'name': ...}",
            param="tool_choice",
        )
    raise wrong(
        "tool_choice", choice, "'auto', 'none', 'required' or {'type': 'function', 'name': ...}"
    )


def _text_params(text: Any) -> dict[str, Any]:
    """`text.format` as `response_format`, `text.verbosity` as `verbosity`."""
    if text is None:
        return {}
    if not isinstance(text, dict):
        raise wrong("text", text, "an object")
    params: dict[str, Any] = {}
    if text.get("verbosity") is not None:
        params["verbosity"] = _one_of(text["verbosity"], VERBOSITIES, "text.verbosity")
    fmt = text.get("format")
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if fmt is None or kind == "text":
        return params
    if kind == "json_object":
        return {**params, "response_format": {"type": "json_object"}}
    if kind != "json_schema":
        raise wrong("text.format", fmt, "an object whose type is text, json_object or json_schema")
    check_strings(fmt, "text.format", ("name",))
    if not isinstance(fmt.get("schema"), dict):
        raise wrong("text.format.schema", fmt.get("schema"), "a JSON schema (an object)")
    schema = {
        name: fmt[name]
        for name in ("name", "schema", "strict", "description")
        if fmt.get(name) is not None
    }
    return {**params, "response_format": {"type": "json_schema", "json_schema": schema}}


def _reasoning_params(reasoning: Any) -> dict[str, Any]:
    if reasoning is None:
        return {}
    if not isinstance(reasoning, dict):
        raise wrong("reasoning", reasoning, "an object")
    if reasoning.get("summary") is not None:
        _one_of(reasoning["summary"], SUMMARIES, "reasoning.summary")
    effort = reasoning.get("effort")
    return (
        {} if effort is None else {"reasoning_effort": _one_of(effort, EFFORTS, "reasoning.effort")}
    )


def _logprob_params(body: Mapping[str, Any]) -> dict[str, Any]:
    top = _checked(body, "top_logprobs")
    include = body.get("include")
    wanted = isinstance(include, list) and "message.output_text.logprobs" in include
    if top is None:
        return {"logprobs": True} if wanted else {}
    return {"logprobs": True, "top_logprobs": top}


def _one_of(value: Any, allowed: Sequence[str], where: str) -> str:
    if value not in allowed:
        raise wrong(where, value, "one of " + ", ".join(allowed), quote=True)
    result: str = value
    return result


def check_strings(
    holder: Mapping[str, Any], where: str, required: Sequence[str], one_of: Sequence[str] = ()
) -> None:
    """`required` fields are strings; at least one of `one_of` is, and each given one is."""
    for name in required:
        if not isinstance(holder.get(name), str):
            raise wrong(f"{where}.{name}", holder.get(name), "a string")
    for name in one_of:
        if holder.get(name) is not None and not isinstance(holder[name], str):
            raise wrong(f"{where}.{name}", holder[name], "a string")
    if one_of and not any(holder.get(name) is not None for name in one_of):
        names = " or ".join(repr(name) for name in one_of)
        raise InvalidChatRequest(f"{where!r} needs {names}", param=where)


def wrong(where: str, value: Any, expected: str, quote: bool = False) -> InvalidChatRequest:
    """The error for a field that is missing or of the wrong kind, naming what it must be and
    saying back what it was given (`field_problem`; `quote`: any string, not only a word)."""
    return InvalidChatRequest(field_problem(where, value, expected, quote), param=where)
