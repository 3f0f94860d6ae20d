"""Compaction ahead of the wall end to end: with a known window, no upstream call ever fails."""

from __future__ import annotations

import time

import httpx
import pytest
from openai._legacy_response import LegacyAPIResponse
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam

from tests.e2e.conftest import MASTER_KEY, Served
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


def background_jobs(served: Served) -> dict[str, float]:
    """overspill's finished background growths by result (its /metrics)."""
    response = httpx.get(
        served.base_url + "/metrics", headers={"authorization": f"Bearer {MASTER_KEY}"}
    )
    found: dict[str, float] = {}
    for line in response.text.splitlines():
        if line.startswith("overspill_compaction_jobs_total{"):
            result = line.split('result="', 1)[1].split('"', 1)[0]
            found[result] = found.get(result, 0.0) + float(line.rsplit(" ", 1)[1])
    return found


def next_job(served: Served, before: dict[str, float]) -> str:
    """The result of the background growth that finishes next (polled, bounded)."""
    deadline = time.monotonic() + 300
    while True:
        now = background_jobs(served)
        changed = [result for result, count in now.items() if count > before.get(result, 0)]
        if changed:
            return changed[0]
        assert time.monotonic() < deadline, "the background growth did not finish in 300 s"
        time.sleep(0.2)  # polling a real server's background work, not a test sleep


def test_the_turn_after_a_background_growth_reads_its_prefix_from_cache(
    compacting: Served, request: pytest.FixtureRequest
) -> None:
    """After a growth ran in the background (and warmed llama-server's one slot, which the
    extraction calls had taken), the next turn is spliced from it and most of its prompt is
    served from the prefix cache."""
    client = compacting.client()
    request.addfinalizer(client.close)
    question: ChatCompletionMessageParam = {"role": "user", "content": "What is the vault code?"}
    headers = {"X-Conversation-Id": "e2e-warm-cache"}

    def send(turns: int) -> LegacyAPIResponse[ChatCompletion]:
        return client.chat.completions.with_raw_response.create(
            model="local", messages=[*conversation(turns), question], max_tokens=4,
            temperature=0, extra_headers=headers,
        )  # fmt: skip

    for turns in range(12, 48):
        before = background_jobs(compacting)
        if send(turns).headers.get("x-overspill-compaction") != "scheduled":
            continue
        if next_job(compacting, before) != "done":
            continue  # the 135M model answered the extraction with nothing: nothing to warm
        raw = send(turns + 1)
        assert raw.headers["x-overspill-action"] == "spliced"
        usage = raw.parse().usage
        assert usage is not None
        assert usage.prompt_tokens_details is not None
        cached = usage.prompt_tokens_details.cached_tokens or 0
        assert cached >= 0.6 * usage.prompt_tokens, (cached, usage.prompt_tokens)
        return
    pytest.fail("no background growth stored an extraction in 48 turns")
