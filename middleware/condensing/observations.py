"""Observation masking an agent can undo: which old tool results to mask, and how. Pure.

A tool result the agent has moved past costs its tokens on every later turn. Past a trigger,
the results of all but the newest `keep` tool uses are replaced in what is sent upstream, by
what the tool did:

- a re-runnable read or search (`Read`, `read_file`, `grep`, `Glob`, `ls`, a web fetch...) is
  masked whole: a placeholder names the call and its size;
- a command with side effects (`Bash`, `Edit`, `Write`, `run_tests`...), and any tool the
  policy cannot place, keeps an excerpt (its first and last lines) around the placeholder:
  running it again would do it again;
- an error is kept as it is: the agent learns from it;
- nothing up to the task's first request (the first user message) is masked;
- the uses of `exclude`d tools are never masked.

Every placeholder names the call's id, which overspill's recall tool (`RECALL_TOOL`) takes to
bring the original back: the agent can undo any masking. The client's own history is never
changed, so the original is always in the request that carries its placeholder.

Masking moves in batches, so a prompt cache keeps hitting: scanning the results from the
start, a batch point falls each time the maskable results since the last point would save
`clear_at_least` tokens; what is masked is every maskable result before the last batch point
that is older than the kept tool uses. The points depend only on the messages before them, so
a growing conversation keeps its earlier points: a result once masked stays masked, in the
same words, and the masked prefix changes only when a whole new batch is masked.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from kernel.tokens import count_text
from kernel.types import Message
from middleware.condensing.prompt import content_text

RECALL_TOOL = "overspill_recall"
"""The tool overspill adds to a request whose tool results it masked, and answers itself."""
RECALL_DEFINITION: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": RECALL_TOOL,
        "description": (
            "Bring back a tool result that overspill masked to keep this conversation within "
            "the model's context window. Call it with the id a placeholder names when you need "
            "that result's full text again, instead of running the tool again."
        ),
        "parameters": {
            "type": "object",
            "properties": {"id": {"type": "string", "description": "the id the placeholder names"}},
            "required": ["id"],
        },
    },
}
MIN_SAVING = 32
"""A result whose placeholder would save fewer tokens than this stays as it is."""
EXCERPT_LINES = 4
"""Lines kept at each end of a side-effecting command's result."""
EXCERPT_LINE_CHARS = 160
PLACEHOLDERS_COUNTED = 16384
"""Placeholders whose tokens this process remembers (at most ~1.5 KB each: a command's
excerpt of eight short lines), over all conversations."""
READS = frozenset(
    {
        "read", "view", "cat", "open", "get", "fetch", "search", "grep", "glob", "find", "ls",
        "list", "query", "lookup", "show", "describe", "inspect", "head", "tail", "browse",
        "retrieve", "load", "stat", "tree", "diff", "status", "log",
    }
)  # fmt: skip
"""Words of a tool's name that say it reads (run again, it gives the same, doing nothing)."""
WRITES = frozenset(
    {
        "write", "edit", "create", "delete", "remove", "update", "apply", "patch", "move",
        "rename", "install", "commit", "push", "post", "send", "run", "exec", "execute",
        "bash", "shell", "command", "terminal", "kill", "set", "put", "insert", "replace",
        "deploy", "start", "stop", "todo", "task", "agent",
    }
)  # fmt: skip
"""Words of a tool's name that say it acts (they win over READS: `read_and_update`)."""
_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
_ERROR = re.compile(r"^\s*(\[tool error\]|<tool_use_error>|error\b|Error\b|ERROR\b|Traceback)")


@dataclass(frozen=True, slots=True)
class Policy:
    """When and what to mask (overspill's defaults, or a client's `clear_tool_uses`)."""

    trigger: int | None
    """Estimated prompt tokens past which results are masked (None: not by tokens)."""
    trigger_uses: int | None = None
    """Mask once the conversation holds more tool uses than this."""
    keep: int = 3
    clear_at_least: int = 0
    exclude: frozenset[str] = frozenset()
    clear_inputs: bool | frozenset[str] = False


@dataclass(frozen=True, slots=True)
class Masked:
    """A conversation with old tool results masked."""

    messages: tuple[Message, ...]
    masked: tuple[str, ...]
    """The ids of the tool calls whose results were masked (or cut to an excerpt)."""
    cleared_inputs: tuple[str, ...]
    """The ids of the tool calls whose arguments were cleared too."""
    saved: int
    """Tokens the masking saved (as counted)."""


@dataclass(frozen=True, slots=True)
class _Call:
    index: int
    name: str
    arguments: str


def plan_masking(
    messages: Sequence[Message],
    counts: Sequence[int],
    policy: Policy,
    *,
    estimate: int,
    model: str = "",
) -> Masked | None:
    """The conversation with its old tool results masked by `policy` (`counts`: each message's
    tokens; `estimate`: the prompt's, against the trigger); None when nothing is to be masked."""
    calls = _calls(messages)
    over = policy.trigger is not None and estimate > policy.trigger
    if policy.trigger_uses is not None and len(calls) > policy.trigger_uses:
        over = True
    if not over or len(calls) <= policy.keep:
        return None
    ordered = sorted(calls.values(), key=lambda call: call.index)
    boundary = ordered[len(ordered) - policy.keep].index if policy.keep else len(messages)
    first = _first_request(messages)
    chosen: list[tuple[int, str, str, int]] = []  # (index, call id, new content, tokens saved)
    pending: list[tuple[int, str, str, int]] = []
    saving = 0
    for index in range(first + 1, boundary):
        message = messages[index]
        if message.get("role") != "tool":
            continue
        call_id = str(message.get("tool_call_id"))
        call = calls.get(call_id)
        if call is None or call.name in policy.exclude:
            continue
        masked = _masked(message, call, call_id, counts[index], model)
        if masked is None:
            continue
        saved = counts[index] - _tokens(masked, model)
        if saved < MIN_SAVING:
            continue
        pending.append((index, call_id, masked, saved))
        saving += saved
        if saving >= max(1, policy.clear_at_least):
            chosen.extend(pending)
            pending, saving = [], 0
    if not chosen:
        return None
    return _apply(messages, chosen, calls, policy, model)


def _apply(
    messages: Sequence[Message],
    chosen: Sequence[tuple[int, str, str, int]],
    calls: Mapping[str, _Call],
    policy: Policy,
    model: str,
) -> Masked:
    out = list(messages)
    saved = 0
    for index, _, content, tokens in chosen:
        out[index] = {**messages[index], "content": content}
        saved += tokens
    ids = tuple(call_id for _, call_id, _, _ in chosen)
    cleared = tuple(
        call_id
        for call_id in ids
        if policy.clear_inputs is True
        or (
            isinstance(policy.clear_inputs, frozenset)
            and calls[call_id].name in policy.clear_inputs
        )
    )
    for index in sorted({calls[call_id].index for call_id in cleared}):
        before = out[index]
        out[index] = {**before, "tool_calls": _cleared_calls(before, set(cleared))}
        saved += count_text(content_text(before), model) - count_text(
            content_text(out[index]), model
        )
    return Masked(tuple(out), ids, cleared, max(0, saved))


def _cleared_calls(message: Message, cleared: set[str]) -> list[Any]:
    calls = []
    for call in message.get("tool_calls") or ():
        if isinstance(call, Mapping) and call.get("id") in cleared:
            function = {**(call.get("function") or {}), "arguments": "{}"}
            calls.append({**call, "function": function})
        else:
            calls.append(call)
    return calls


@functools.lru_cache(maxsize=PLACEHOLDERS_COUNTED)
def _tokens(placeholder: str, model: str) -> int:
    """A placeholder's tokens (cached: an agent's every request brings back the placeholders
    of all its masked results, which cost ~30 µs each to count)."""
    return count_text(placeholder, model)


def _calls(messages: Sequence[Message]) -> dict[str, _Call]:
    """Every tool call by its id: the assistant message holding it, its name and arguments."""
    found: dict[str, _Call] = {}
    for index, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or ():
            if not isinstance(call, Mapping) or not isinstance(call.get("id"), str):
                continue
            function = call.get("function")
            function = function if isinstance(function, Mapping) else {}
            arguments = function.get("arguments")
            found[call["id"]] = _Call(
                index,
                str(function.get("name") or "a tool"),
                arguments if isinstance(arguments, str) else "",
            )
    return found


def _first_request(messages: Sequence[Message]) -> int:
    """The index of the first user message (the task's request), or -1 when there is none."""
    for index, message in enumerate(messages):
        if message.get("role") == "user":
            return index
    return -1


@functools.lru_cache(maxsize=1024)
def reads(name: str) -> bool:
    """Whether a tool, by its name's words, reads without acting (run again, the same)."""
    words = {word.lower() for word in _WORDS.findall(name)}
    return bool(words & READS) and not words & WRITES


def is_error(text: str) -> bool:
    """Whether a tool result reports an error (kept whole: the agent learns from it)."""
    return _ERROR.match(text) is not None


def _masked(message: Message, call: _Call, call_id: str, tokens: int, model: str) -> str | None:
    """The result's masked content, or None when it stays (an error, or no text)."""
    text = content_text(message)
    if not text or is_error(text):
        return None
    shown = f"{call.name}({_arguments(call.arguments)})"
    recall = f'call {RECALL_TOOL} with id "{call_id}" to see it whole'
    if reads(call.name):
        return (
            f"[overspill masked this result of {shown} ({tokens:,} tokens): the tool can read "
            f"it again, or {recall}]"
        )
    lines = text.splitlines()
    if len(lines) > 2 * EXCERPT_LINES:
        head, tail = lines[:EXCERPT_LINES], lines[-EXCERPT_LINES:]
    elif len(text) > 4 * EXCERPT_LINE_CHARS:  # few long lines: their first and last characters
        head, tail = [text[:EXCERPT_LINE_CHARS]], [text[-EXCERPT_LINE_CHARS:]]
    else:
        return None  # short: an excerpt would be the result itself
    cut = [
        *map(_line, head),
        f"[… overspill masked the middle of this result of {shown} ({tokens:,} tokens); "
        f"{recall} …]",
        *map(_line, tail),
    ]
    return "\n".join(cut)


def _line(line: str) -> str:
    return line if len(line) <= EXCERPT_LINE_CHARS else line[: EXCERPT_LINE_CHARS - 1] + "…"


def _arguments(raw: str) -> str:
    """A call's arguments, short: `k=v` pairs of its JSON object, else its text."""
    try:
        parsed = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        parsed = raw
    if isinstance(parsed, dict):
        text = ", ".join(f"{k}={_short(v, 60)}" for k, v in parsed.items())
    else:
        text = str(parsed)
    return _short(text, 120)


def _short(value: Any, limit: int) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def recall_answer(call_id: str, originals: Mapping[str, str], limit: int | None = None) -> str:
    """What the recall tool answers for `call_id`: the original result (cut in the middle to
    `limit` characters when given), or why it cannot."""
    found = originals.get(call_id)
    if found is None:
        return (
            f"overspill has no masked tool result with id {call_id!r} in this conversation: "
            "use an id a placeholder names"
        )
    if limit is not None and len(found) > limit:
        half = limit // 2
        return f"{found[:half]}\n[… {len(found) - limit:,} characters left out …]\n{found[-half:]}"
    return found
