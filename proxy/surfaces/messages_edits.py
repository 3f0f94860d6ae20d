"""Anthropic's `context_management` request field, read into overspill's neutral options: pure.

    clear_tool_uses_20250919   old tool results cleared past a trigger (RequestContext's
                               `tool_clearing`, honoured by the observation_masking layer for
                               any upstream; the originals stay retrievable)
    clear_thinking_20251015    thinking of older assistant turns left out (a chat upstream takes
                               none at all: every thinking turn is left out, and reported)
    compact_20260112           the conversation compacted past a trigger (RequestContext's
                               `compact_threshold` starts overspill's background compaction
                               there; past it the answer begins with a `compaction` block)

Defaults are Anthropic's: clearing triggers at 100,000 input tokens and keeps 3 tool uses;
compaction triggers at 150,000. `applied` writes the answer's `context_management` field: the
edits that changed what the model saw, as Anthropic reports them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kernel.errors import InvalidChatRequest
from kernel.json_values import is_int
from kernel.types import Cleared, ToolClearing
from proxy.surfaces.responses_params import wrong

CLEAR_TOOL_USES = "clear_tool_uses_20250919"
CLEAR_THINKING = "clear_thinking_20251015"
COMPACT = "compact_20260112"
CLEAR_TRIGGER = 100_000
CLEAR_KEEP = 3
COMPACT_TRIGGER = 150_000
MIN_COMPACT_TRIGGER = 50_000
"""Anthropic's lowest compaction trigger."""


@dataclass(frozen=True, slots=True)
class Compaction:
    """The compaction edit: compact past `trigger` input tokens."""

    trigger: int = COMPACT_TRIGGER
    pause: bool = False
    """Answer with the compaction block alone (stop_reason `compaction`)."""
    instructions: str | None = None


@dataclass(frozen=True, slots=True)
class Edits:
    """The context edits a request asked for."""

    clearing: ToolClearing | None = None
    thinking_keep: int | None = None
    """Assistant turns whose thinking is kept (None: no such edit; -1: all)."""
    compaction: Compaction | None = None

    @property
    def asked(self) -> bool:
        """Whether the request asked for any edit."""
        return (
            self.clearing is not None
            or self.thinking_keep is not None
            or self.compaction is not None
        )


NO_EDITS = Edits()


def read_edits(value: Any) -> Edits:
    """The request's `context_management`, checked (a 400 naming the edit's field)."""
    if value is None:
        return NO_EDITS
    if not isinstance(value, dict):
        raise wrong("context_management", value, "an object with an 'edits' array")
    edits = value.get("edits")
    if edits is None:
        return NO_EDITS
    if not isinstance(edits, list):
        raise wrong("context_management.edits", edits, "an array of context edits")
    found: dict[str, Any] = {}
    for index, edit in enumerate(edits):
        where = f"context_management.edits[{index}]"
        kind = edit.get("type") if isinstance(edit, dict) else None
        if kind == CLEAR_TOOL_USES:
            found["clearing"] = _clearing(edit, where)
        elif kind == CLEAR_THINKING:
            found["thinking_keep"] = _thinking_keep(edit.get("keep"), f"{where}.keep")
        elif kind == COMPACT:
            found["compaction"] = _compaction(edit, where)
        else:
            expected = f"an edit whose type is {CLEAR_TOOL_USES}, {CLEAR_THINKING} or {COMPACT}"
            raise wrong(where, edit, expected)
    return Edits(**found)


def _clearing(edit: Mapping[str, Any], where: str) -> ToolClearing:
    trigger = edit.get("trigger")
    tokens: int | None = CLEAR_TRIGGER
    uses: int | None = None
    if trigger is not None:
        kind = trigger.get("type") if isinstance(trigger, dict) else None
        if kind == "tool_uses":
            tokens, uses = None, _count(trigger, f"{where}.trigger", 1)
        else:
            tokens = _counted(trigger, "input_tokens", f"{where}.trigger", 1)
    keep = _counted(edit.get("keep"), "tool_uses", f"{where}.keep", 0, CLEAR_KEEP)
    least = _counted(edit.get("clear_at_least"), "input_tokens", f"{where}.clear_at_least", 0, 0)
    exclude = _names(edit.get("exclude_tools"), f"{where}.exclude_tools")
    inputs = edit.get("clear_tool_inputs")
    clear_inputs: bool | frozenset[str] = False
    if isinstance(inputs, bool):
        clear_inputs = inputs
    elif inputs is not None:
        clear_inputs = _names(inputs, f"{where}.clear_tool_inputs")
    return ToolClearing(
        trigger=tokens,
        trigger_uses=uses,
        keep=keep,
        clear_at_least=least,
        exclude=exclude,
        clear_inputs=clear_inputs,
    )


def _thinking_keep(keep: Any, where: str) -> int:
    if keep is None or keep == "all" or (isinstance(keep, dict) and keep.get("type") == "all"):
        return -1
    return _counted(keep, "thinking_turns", where, 1)


def _compaction(edit: Mapping[str, Any], where: str) -> Compaction:
    trigger = edit.get("trigger")
    tokens = COMPACT_TRIGGER
    if trigger is not None:
        tokens = _counted(trigger, "input_tokens", f"{where}.trigger", MIN_COMPACT_TRIGGER)
    pause = edit.get("pause_after_compaction")
    if pause is not None and not isinstance(pause, bool):
        raise wrong(f"{where}.pause_after_compaction", pause, "true or false")
    instructions = edit.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise wrong(f"{where}.instructions", instructions, "a string")
    return Compaction(tokens, bool(pause), instructions)


def _counted(value: Any, kind: str, where: str, least: int, default: int | None = None) -> int:
    """A `{"type": kind, "value": N}` object's N (at least `least`); `default` when absent."""
    if value is None and default is not None:
        return default
    if not isinstance(value, dict) or value.get("type") != kind:
        raise wrong(where, value, f"an object {{'type': '{kind}', 'value': <count>}}")
    return _count(value, where, least)


def _count(value: Mapping[str, Any], where: str, least: int) -> int:
    count = value.get("value")
    if not is_int(count) or count < least:
        raise InvalidChatRequest(
            f"{where}.value must be an integer of at least {least}", param=f"{where}.value"
        )
    return count


def _names(value: Any, where: str) -> frozenset[str]:
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise wrong(where, value, "an array of tool names")
    return frozenset(value)


def applied(
    edits: Edits, cleared: Cleared | None, thinking: Sequence[int]
) -> dict[str, Any] | None:
    """The answer's `context_management` field: the asked edits that changed the prompt
    (`thinking`: the tokens of each assistant turn's thinking left out, oldest first)."""
    if not edits.asked:
        return None
    done: list[dict[str, Any]] = []
    if edits.clearing is not None and cleared is not None and cleared.tool_uses:
        done.append(
            {
                "type": CLEAR_TOOL_USES,
                "cleared_tool_uses": cleared.tool_uses,
                "cleared_input_tokens": cleared.tokens,
            }
        )
    if edits.thinking_keep is not None and thinking:
        done.append(
            {
                "type": CLEAR_THINKING,
                "cleared_thinking_turns": len(thinking),
                "cleared_input_tokens": sum(thinking),
            }
        )
    return {"applied_edits": done}
