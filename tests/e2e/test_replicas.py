"""Two overspill processes sharing one real Redis: one extraction between them, and splices."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.e2e.conftest import Served, local_config, start_overspill
from tests.e2e.test_overflow_recovery import conversation

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def replicas(
    llama_server: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Served, Served]]:
    """Two `overspill serve` processes with their default layers on one Redis."""
    store = f"{{backend: redis, url: '{redis_url}', key_prefix: 'e2e-{secrets.token_hex(3)}:'}}"
    config = local_config(llama_server, None, store)
    started = [start_overspill(config, tmp_path_factory.mktemp(f"replica{i}")) for i in (1, 2)]
    try:
        yield (
            Served(started[0][1], started[0][2], llama_server),
            Served(started[1][1], started[1][2], llama_server),
        )
    finally:
        for process, _, _ in started:
            process.terminate()
            process.wait(timeout=10)


def ask(
    served: Served, messages: list[ChatCompletionMessageParam], conversation_id: str
) -> dict[str, str]:
    raw = served.client().chat.completions.with_raw_response.create(
        model="local", messages=messages, max_tokens=8, temperature=0,
        extra_headers={"X-Conversation-Id": conversation_id},
    )  # fmt: skip
    assert raw.status_code == 200
    return {k: v for k, v in raw.headers.items() if k.startswith("x-overspill-")}


def test_one_replica_extracts_the_other_splices(replicas: tuple[Served, Served]) -> None:
    """An overflow condensed on replica A is spliced by replica B on the next turn."""
    first, second = replicas
    messages: list[ChatCompletionMessageParam] = [
        *conversation(30),
        {"role": "user", "content": "What is the vault code?"},
    ]
    assert ask(first, messages, "shared-1")["x-overspill-action"] == "extracted"
    messages += [
        {"role": "assistant", "content": "ZX-4471"},
        {"role": "user", "content": "And the captain?"},
    ]
    headers = ask(second, messages, "shared-1")
    assert headers["x-overspill-action"].startswith("spliced")
    assert "x-overspill-attempts" not in headers


def test_concurrent_overflows_on_two_replicas_extract_once(replicas: tuple[Served, Served]) -> None:
    """The same conversation overflowing on both replicas at once is extracted only once."""
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
