"""What both of overspill's own translations check alike (`providers/translation.py`): a
parameter in the wrong shape is a 400 naming it, whichever wire writes the request."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kernel.errors import InvalidChatRequest
from providers import anthropic_wire, gemini_wire

Write = Callable[[dict[str, Any]], object]
WIRES: dict[str, Write] = {
    "anthropic": lambda chat: anthropic_wire.request_body(
        chat, chat["messages"], "claude-sonnet-4-5", max_tokens=10, drop_params=False
    ),
    "gemini": lambda chat: gemini_wire.request_body(
        chat, chat["messages"], "gemini-2.5-flash", system_instruction=True, drop_params=False
    ),
}
USER = [{"role": "user", "content": "x"}]


@pytest.mark.parametrize("wire", sorted(WIRES))
@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"tool_choice": "sometimes"}, "tool_choice must be"),
        ({"max_tokens": 0}, "max_tokens must be a positive integer"),
        ({"stop": [1]}, "stop must be"),
        ({"tools": [{"type": "function", "function": {}}]}, "tools[0].function needs a name"),
    ],
)
def test_a_parameter_in_the_wrong_shape_is_named(
    wire: str, fields: dict[str, Any], where: str
) -> None:
    """tool_choice, max_tokens, stop and tools in the wrong shape are a 400 that says which."""
    with pytest.raises(InvalidChatRequest) as caught:
        WIRES[wire]({"messages": USER, **fields})
    assert where in caught.value.message
