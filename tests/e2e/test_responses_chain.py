"""A Responses chain that outgrows the window, turn by turn by previous_response_id, against the
real local model: compaction keeps it going and no upstream call is refused. (The 200-turn
comparison with chat completions, prompt for prompt, is tests/proxy/test_responses_chain.py on a
scripted model; `scripts/responses_chain.py` runs it on the real one.)"""

from __future__ import annotations

import pytest

from kernel.tokens import count_text
from tests.e2e.conftest import Served
from tests.e2e.test_overflow_recovery import recoveries

pytestmark = pytest.mark.e2e

TURNS = 50


def report(turn: int) -> str:
    """A day's report of about 50 tokens (the vault code on day 3)."""
    fact = "the vault code is 4471" if turn == 3 else f"nothing new happened on day {turn}"
    work = "the hull, the engines, the radio, the galley and the cargo hold"
    return f"Day {turn} report: {fact}. The crew worked on {work}; the sea was calm all day."


def test_a_chain_past_the_window_is_compacted_without_a_refused_call(responding: Served) -> None:
    """A 50-turn chain whose reports alone outgrow the 2048-token window: every turn answers on
    its first upstream call, and the chain is spliced from its extraction once it grew."""
    assert count_text(" ".join(report(turn) for turn in range(TURNS))) > 2048
    client = responding.client()
    headers = {"X-Conversation-Id": "e2e-responses-chain"}
    previous: str | None = None
    actions: list[str] = []
    for turn in range(TURNS):
        raw = client.responses.with_raw_response.create(
            model="local", input=report(turn), previous_response_id=previous,
            max_output_tokens=4, temperature=0, extra_headers=headers,
        )  # fmt: skip
        assert raw.status_code == 200
        assert "x-overspill-attempts" not in raw.headers  # no refused call was retried
        made = raw.parse()
        assert made.usage is not None
        assert made.usage.input_tokens < 2048
        actions.append(raw.headers.get("x-overspill-action", "sent"))
        previous = made.id
    assert actions[0] == "sent"
    assert any(action.startswith("spliced") for action in actions), actions
    assert recoveries(responding) == []
