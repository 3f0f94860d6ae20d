"""One-strike recovery end to end: a conversation larger than the real model's window gets 200."""

from __future__ import annotations

import orjson
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.e2e.conftest import Served

pytestmark = pytest.mark.e2e

FACTS = ["the vault code is ZX-4471", "the launch is on 14 March", "the captain is Ada Moreno"]


def conversation(turns: int) -> list[ChatCompletionMessageParam]:
    """A long synthetic conversation (about 45 tokens per message) with a few planted facts."""
    messages: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": "You are a helpful assistant. Answer briefly."}
    ]
    for turn in range(turns):
        fact = FACTS[turn % len(FACTS)] if turn % 10 == 3 else f"nothing new happened on day {turn}"
        messages.append(
            {
                "role": "user",
                "content": f"Day {turn} report: {fact}. The weather was mild and the crew worked on routine maintenance of the hull, the engines and the radio.",
            }
        )
        messages.append(
            {
                "role": "assistant",
                "content": f"Noted for day {turn}. I will remember that {fact}, and that routine maintenance continued without incident.",
            }
        )
    return messages


def recoveries(served: Served) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in served.log_lines() if '"overflow recovered"' in line]


def test_a_long_conversation_is_condensed_and_answered(recovering: Served) -> None:
    """A 60-turn conversation over the 2048-token window gets 200 after one extraction, and the
    next turn is spliced from the cache before sending (no failed upstream call)."""
    client = recovering.client()
    question: ChatCompletionMessageParam = {"role": "user", "content": "What is the vault code?"}
    messages = [*conversation(30), question]
    headers = {"X-Conversation-Id": "e2e-sixty-turns"}
    raw = client.chat.completions.with_raw_response.create(
        model="local", messages=messages, max_tokens=16, temperature=0, extra_headers=headers
    )
    completion = raw.parse()
    assert raw.status_code == 200
    assert raw.headers["x-overspill-action"] == "extracted"
    assert raw.headers["x-overspill-attempts"] == "2"
    assert int(raw.headers["x-overspill-extraction-calls"]) >= 1
    assert int(raw.headers["x-overspill-tokens-after"]) < int(
        raw.headers["x-overspill-tokens-before"]
    )
    assert completion.usage is not None
    assert completion.usage.prompt_tokens < 2048
    assert len(recoveries(recovering)) == 1

    answer = completion.choices[0].message.content or ""
    reply: ChatCompletionMessageParam = {"role": "assistant", "content": answer}
    again: ChatCompletionMessageParam = {"role": "user", "content": "And who is the captain?"}
    follow_up = [*messages, reply, again]
    raw = client.chat.completions.with_raw_response.create(
        model="local", messages=follow_up, max_tokens=16, temperature=0, extra_headers=headers
    )
    assert raw.status_code == 200
    assert raw.headers["x-overspill-action"] in ("spliced", "spliced+extracted")
    assert "x-overspill-attempts" not in raw.headers
    assert len(recoveries(recovering)) == 1
