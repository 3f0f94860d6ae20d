"""Two overspill processes sharing one real Redis: the same decisions on either replica.

One extraction between them, identical splices, identical document placement, and one
calibration learned by both (all conversation state is in the store).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.e2e.conftest import Served, local_config, start_overspill, stop
from tests.e2e.relay import Recorded, answering_prompts
from tests.e2e.test_overflow_recovery import conversation

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def replicas(
    llama_server: str,
    relay: tuple[str, Recorded],
    redis_url: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Served, Served]]:
    """Two `overspill serve` processes with their default layers on one Redis, both sending
    to the model through the relay."""
    store = f"{{backend: redis, url: '{redis_url}', key_prefix: 'e2e-{secrets.token_hex(3)}:', "
    store += "lock_wait_seconds: 300}"  # a loaded box's extraction outlasts the default 60 s
    config = local_config(relay[0], None, store)
    started = [start_overspill(config, tmp_path_factory.mktemp(f"replica{i}")) for i in (1, 2)]
    try:
        yield (
            Served(started[0][1], started[0][2], llama_server),
            Served(started[1][1], started[1][2], llama_server),
        )
    finally:
        for process, _, _ in started:
            stop(process)


@dataclass(frozen=True)
class Answer:
    """What one replica answered: its x-overspill headers and the model's prompt count."""

    headers: dict[str, str]
    prompt_tokens: int


def send(
    served: Served,
    messages: list[ChatCompletionMessageParam],
    conversation_id: str,
    documents: list[dict[str, Any]] | None = None,
) -> Answer:
    # llama-server's prompt cache on, as a client has it: the prompts are compared (the relay),
    # and no answer's text is
    extra: dict[str, Any] = {} if documents is None else {"documents": documents}
    raw = served.client().chat.completions.with_raw_response.create(
        model="local", messages=messages, max_tokens=8, temperature=0,
        extra_headers={"X-Conversation-Id": conversation_id}, extra_body=extra,
    )  # fmt: skip
    assert raw.status_code == 200
    reply = raw.parse()
    assert reply.usage is not None
    headers = {k: v for k, v in raw.headers.items() if k.startswith("x-overspill-")}
    return Answer(headers, reply.usage.prompt_tokens)


def ask(
    served: Served, messages: list[ChatCompletionMessageParam], conversation_id: str
) -> dict[str, str]:
    return send(served, messages, conversation_id).headers


def test_concurrent_overflows_on_two_replicas_extract_once(replicas: tuple[Served, Served]) -> None:
    """The same long conversation arriving on both replicas at once is extracted only once."""
    messages: list[ChatCompletionMessageParam] = [
        *conversation(32),
        {"role": "user", "content": "Who is the captain?"},
    ]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda served: ask(served, messages, "shared-2"), replicas))
    extracted = [h for h in results if int(h.get("x-overspill-extraction-calls", "0")) > 0]
    assert len(extracted) == 1, results
    others = [h for h in results if h not in extracted]
    assert others[0]["x-overspill-action"] in ("reused", "spliced")


def test_both_replicas_splice_the_same_prefix(
    replicas: tuple[Served, Served], relay: tuple[str, Recorded]
) -> None:
    """A conversation compacted on one replica (before its known window) is spliced by the
    other on the next turn, with no refused call, and either replica sends the same spliced
    prompt for that turn (when the first grows the extraction ahead of the wall, the second
    reuses what it grew).
    The prompts are compared, not the answers: how much of a prompt the model server has
    cached changes how it splits the rest into batches, which moves a greedy answer's last
    tokens."""
    first, second = replicas
    recorded = relay[1]
    messages: list[ChatCompletionMessageParam] = [
        *conversation(30),
        {"role": "user", "content": "What is the vault code?"},
    ]
    assert send(first, messages, "shared-3").headers["x-overspill-action"] == "spliced+extracted"
    messages += [
        {"role": "assistant", "content": "ZX-4471"},
        {"role": "user", "content": "And the captain?"},
    ]
    since = len(recorded.bodies())
    on_second, on_first = send(second, messages, "shared-3"), send(first, messages, "shared-3")
    prompts = answering_prompts(recorded, since, "And the captain?")
    assert len(prompts) == 2
    assert prompts[0] == prompts[1]
    assert on_second.headers["x-overspill-action"] in ("spliced", "spliced+extracted")
    assert "x-overspill-attempts" not in on_second.headers
    assert on_first.headers["x-overspill-action"] == "spliced"
    assert (
        on_second.headers["x-overspill-messages-replaced"]
        == (on_first.headers["x-overspill-messages-replaced"])
    )
    assert on_second.prompt_tokens == on_first.prompt_tokens


def test_both_replicas_place_earlier_documents_alike(replicas: tuple[Served, Served]) -> None:
    """Documents placed by one replica are the existing context on the other: the same next
    turn sends the same prompt on both, and it holds the earlier batch."""
    first, second = replicas
    turn_one: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "Which query reads the orders table?"}
    ]
    earlier = [{"id": "q-1", "text": "SELECT id, total FROM orders WHERE total > 100;"}]
    send(first, turn_one, "shared-docs", earlier)
    turn_two: list[ChatCompletionMessageParam] = [
        *turn_one,
        {"role": "assistant", "content": "q-1."},
        {"role": "user", "content": "And which one reads customers?"},
    ]
    later = [{"id": "q-2", "text": "SELECT name FROM customers WHERE id = 7;"}]
    on_second = send(second, turn_two, "shared-docs", later)
    on_first = send(first, turn_two, "shared-docs", later)
    alone = send(first, turn_two, "fresh-docs", later)
    assert on_second.prompt_tokens == on_first.prompt_tokens
    assert (
        on_second.headers["x-overspill-documents-decision"]
        == (on_first.headers["x-overspill-documents-decision"])
    )
    assert on_second.prompt_tokens > alone.prompt_tokens  # the earlier batch is in it


def test_a_calibration_learned_on_one_replica_serves_the_other(
    replicas: tuple[Served, Served],
) -> None:
    """The token ratio one replica learns from the model's counts corrects the other's
    estimates (tiktoken alone is ~20% short of SmolLM2's count)."""
    first, second = replicas
    messages: list[ChatCompletionMessageParam] = [
        *conversation(34),
        {"role": "user", "content": "Who is the captain?"},
    ]
    send(first, messages, "shared-4")
    for turn in range(3):  # spliced turns on the first replica teach the ratio
        messages += [
            {"role": "assistant", "content": "Noted."},
            {"role": "user", "content": f"Anything else on day {turn}?"},
        ]
        send(first, messages, "shared-4")
    messages += [
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "Summarise the crew."},
    ]
    answer = send(second, messages, "shared-4")
    estimate = int(answer.headers["x-overspill-tokens-after"])
    assert abs(estimate - answer.prompt_tokens) <= 0.06 * answer.prompt_tokens
