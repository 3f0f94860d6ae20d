"""Compaction ahead of the wall end to end: with a known window, no upstream call ever fails."""

from __future__ import annotations

import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.e2e.conftest import Served
from tests.e2e.test_overflow_recovery import conversation, recoveries

pytestmark = pytest.mark.e2e


def test_a_growing_conversation_never_overflows_a_known_window(compacting: Served) -> None:
    """A conversation sent turn by turn past the 2048-token window is compacted before each
    request could be refused: every turn answers 200 on its first upstream call."""
    client = compacting.client()
    question: ChatCompletionMessageParam = {"role": "user", "content": "What is the vault code?"}
    headers = {"X-Conversation-Id": "e2e-known-window"}
    actions = []
    for turns in range(10, 42, 4):
        raw = client.chat.completions.with_raw_response.create(
            model="local",
            messages=[*conversation(turns), question],
            max_tokens=8,
            temperature=0,
            extra_headers=headers,
        )
        assert raw.status_code == 200
        assert "x-overspill-attempts" not in raw.headers  # no refused call was retried
        completion = raw.parse()
        assert completion.usage is not None
        assert completion.usage.prompt_tokens < 2048
        actions.append(raw.headers.get("x-overspill-action", "sent"))
    assert actions[0] == "sent"  # the short conversation goes as the client sent it
    assert any(action.startswith("spliced") for action in actions), actions
    assert recoveries(compacting) == []
