"""Bounded and accountable, shown against a scripted upstream with a real window.

Each case sends what a client could send (a 3.3 MB request of 50 documents, a 5 MB message,
a 2,000-turn history, 64 long conversations at once) through overspill's app to
`tests/windowed_upstream.py`, and checks that the request caused no more upstream calls and
own input tokens than its bound, that it got an answer or a clear error, and that what the
`x-overspill-spent-*` headers say equals what the upstream received. Each prints its calls
and tokens (`pytest -s` shows them).
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from kernel.spending import DEFAULT_OWN_CALLS, DEFAULT_OWN_WINDOWS
from kernel.store import DiskHistoryStore
from proxy.app import create_app
from proxy.system import System, build_system
from tests.conftest import running, settings_from
from tests.windowed_upstream import Call, WindowedUpstream

WINDOW = 8192
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "river",
    "stone",
    "cloud",
    "amber",
    "north",
    "engine",
    "quiet",
    "signal",
    "harbor",
    "lantern",
    "meadow",
    "copper",
    "violet",
    "thunder",
    "orchard",
    "granite",
    "falcon",
    "willow",
]
CLIENT_ATTEMPTS = 3
"""A client request goes upstream at most this often: as sent, with its documents placed
again within a window an overflow stated, with its history condensed after an overflow."""


@functools.cache
def sentences() -> tuple[str, ...]:
    """A fixed pool of sentence openings (drawn once: megabytes of text are made from it)."""
    rnd = random.Random(0)
    return tuple(" ".join(rnd.choice(WORDS) for _ in range(12)).capitalize() for _ in range(997))


def prose(seed: int, chars: int) -> str:
    """Deterministic sentences, each with a number a question can ask about."""
    pool = sentences()
    out: list[str] = []
    size = 0
    while size < chars:
        n = seed * 31 + len(out)
        sentence = (
            f"{pool[n % len(pool)]} item {seed}-{len(out)} costs {101 + n * 7919 % 899} units."
        )
        out.append(sentence)
        size += len(sentence) + 1
    return " ".join(out)


@dataclass
class Gateway:
    """overspill's app in front of the scripted upstream, and a client for it."""

    upstream: WindowedUpstream
    system: System
    client: httpx.AsyncClient

    async def ask(self, body: dict[str, Any], **headers: str) -> tuple[httpx.Response, list[Call]]:
        """Send one chat request; the answer and the upstream calls it caused."""
        before = len(self.upstream.calls)
        response = await self.client.post(
            "/v1/chat/completions",
            content=orjson.dumps(body),
            headers={"content-type": "application/json", **headers},
        )
        return response, self.upstream.calls[before:]

    async def settled(self) -> None:
        """Wait until the system's background growths are done."""
        await self.system.jobs.idle()


GatewayFactory = Callable[..., Any]


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """Builds a gateway for a model block (`{upstream}` is the upstream's URL)."""
    made: list[tuple[Gateway, DiskHistoryStore]] = []
    upstreams: list[WindowedUpstream] = []
    closers: list[Any] = []

    async def make(model: str = "", general: str = "", window: int = WINDOW) -> Gateway:
        upstream = await WindowedUpstream(window=window).__aenter__()
        upstreams.append(upstream)
        config = (
            "model_list:\n  - model_name: chat\n    litellm_params: "
            f'{{model: openai/scripted-model, api_base: "{upstream.base_url}"}}\n'
            f"{model}general_settings:\n  master_key: sk-master\n{general}"
        )
        store = DiskHistoryStore(tmp_path / f"store{len(made)}")
        system = build_system(settings_from(config), store=store)
        app = create_app(system)
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://overspill.test",
            headers={"authorization": "Bearer sk-master"},
            timeout=120,
        )
        lifespan = running(app)
        await lifespan.__aenter__()
        made.append((Gateway(upstream, system, client), store))
        closers.append(lifespan)
        return made[-1][0]

    yield make
    for (found, store), lifespan in zip(made, closers, strict=True):
        await found.client.aclose()
        await lifespan.__aexit__(None, None, None)
        await store.aclose()
    for upstream in upstreams:
        await upstream.__aexit__(None, None, None)


def own(calls: list[Call]) -> list[Call]:
    """overspill's own calls among an upstream's (its prompts ask at temperature 0)."""
    return [call for call in calls if call.temperature == 0]


def within_bound(response: httpx.Response, calls: list[Call], window: int = WINDOW) -> None:
    """The request caused no more calls and own input tokens than its bound, the headers
    say what the upstream received, and it got an answer or a clear error."""
    mine = own(calls)
    spent_in = int(response.headers.get("x-overspill-spent-tokens-in", "0"))
    spent_out = int(response.headers.get("x-overspill-spent-tokens-out", "0"))
    print(
        f"status {response.status_code}: {len(calls)} upstream calls ({len(mine)} own), "
        f"{sum(c.body_bytes for c in calls)} bytes sent, own tokens in {spent_in} out "
        f"{spent_out}, bound {response.headers.get('x-overspill-bound', '-')} roads "
        f"{response.headers.get('x-overspill-bound-roads', '-')}"
    )
    assert len(mine) <= DEFAULT_OWN_CALLS
    assert len(calls) <= DEFAULT_OWN_CALLS + CLIENT_ATTEMPTS
    assert spent_in <= DEFAULT_OWN_WINDOWS * window
    assert spent_in == sum(call.prompt_tokens for call in mine)
    assert spent_out == sum(call.completion_tokens for call in mine)
    assert int(response.headers.get("x-overspill-spent-calls", "0")) == len(mine)
    assert int(response.headers.get("x-overspill-upstream-calls", "1")) == len(calls)
    if response.status_code != 200:
        error = response.json()["error"]
        assert error["code"]
        assert error["message"]


async def test_a_request_of_fifty_documents_to_an_unknown_window_is_bounded(
    gateway: GatewayFactory,
) -> None:
    """3.3 MB of documents to a model whose window overspill does not know: answered within
    the bound (the documents placed again within the window the first overflow stated), and
    the next request uses the learned window at once."""
    gate: Gateway = await gateway()
    documents = [{"id": f"doc-{i}", "text": prose(i, 66_000)} for i in range(50)]
    body = {
        "model": "chat",
        "messages": [{"role": "user", "content": "What does item 7-100 cost?"}],
        "documents": documents,
    }
    assert len(orjson.dumps(body)) > 3_300_000
    response, calls = await gate.ask(body)
    within_bound(response, calls)
    assert response.status_code == 200
    assert response.headers["x-overspill-documents-decision"].startswith("appended+replaced=")
    again, calls = await gate.ask(body)
    within_bound(again, calls)
    assert again.status_code == 200
    assert len(calls) == 1  # the window is known now: placed within it, one call


async def test_a_five_megabyte_message_is_bounded(gateway: GatewayFactory) -> None:
    """One 5 MB user message: answered (cut to fit, marked) or refused clearly, within bound."""
    gate: Gateway = await gateway()
    body = {"model": "chat", "messages": [{"role": "user", "content": prose(5, 5_000_000)}]}
    response, calls = await gate.ask(body)
    within_bound(response, calls)
    assert response.status_code == 200
    assert response.headers["x-overspill-oversized"] == "0:truncated"  # cut to fit, marked


def long_history(turns: int, seed: int = 0) -> list[dict[str, Any]]:
    """A system message and `turns` user/assistant turns, each user turn with a fact."""
    rnd = random.Random(seed)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."}]
    for turn in range(turns):
        chatter = " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(8, 30)))
        messages.append(
            {"role": "user", "content": f"Order {turn} is number {1000 + turn}. {chatter}?"}
        )
        messages.append({"role": "assistant", "content": f"Noted order {turn}. {chatter}."})
    messages.append({"role": "user", "content": "Which number is order 3?"})
    return messages


async def test_a_two_thousand_turn_history_is_bounded(gateway: GatewayFactory) -> None:
    """A 2,000-turn history at an 8k window: condensed within the bound and answered."""
    gate: Gateway = await gateway(model=f"    context: {{window: {WINDOW}}}\n")
    body = {"model": "chat", "messages": long_history(2000)}
    response, calls = await gate.ask(body)
    within_bound(response, calls)
    assert response.status_code == 200
    assert response.headers["x-overspill-action"].startswith(("spliced", "extracted"))


async def test_sixty_four_long_conversations_at_once_are_each_bounded(
    gateway: GatewayFactory,
) -> None:
    """64 conversations of 300 turns, sent at once: each within its own bound, and the
    background growths they ask for wait in a bounded queue."""
    gate: Gateway = await gateway(
        model=f"    context: {{window: {WINDOW}}}\n",
        general="  max_background_jobs: 2\n  max_waiting_jobs: 16\n",
    )
    bodies = [{"model": "chat", "messages": long_history(300, seed)} for seed in range(64)]
    answers = await asyncio.gather(
        *(gate.ask(body, **{"x-conversation-id": f"c{n}"}) for n, body in enumerate(bodies))
    )
    for response, _ in answers:
        assert response.status_code == 200
        spent = int(response.headers.get("x-overspill-spent-calls", "0"))
        assert spent <= DEFAULT_OWN_CALLS
        assert int(response.headers.get("x-overspill-spent-tokens-in", "0")) <= 4 * WINDOW
    print(
        f"64 conversations: {len(gate.upstream.calls)} upstream calls, "
        f"{gate.upstream.tokens_in()} tokens in, background jobs waiting "
        f"{gate.system.jobs.waiting}"
    )
    assert gate.system.jobs.waiting <= 16
    total_own = sum(int(r.headers.get("x-overspill-spent-calls", "0")) for r, _ in answers)
    assert len(own(gate.upstream.calls)) >= total_own
    await gate.settled()


def question(turn: int) -> str:
    """One turn's user message: a fact and some words (20-60)."""
    rnd = random.Random(turn)
    words = " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(20, 60)))
    return f"Turn {turn}: my order number is {1000 + turn}. {words}?"


async def test_the_spliced_prefix_changes_at_most_once_every_eight_turns(
    gateway: GatewayFactory,
) -> None:
    """An 80-turn conversation at a 2,500-token window: the prefix the upstream receives
    before the new turns (system + stand-in) changes at most 10 times (it changed 16 times
    when every growth was spliced at once), and each turn's `x-overspill-prefix` says so."""
    gate: Gateway = await gateway(model="    context: {window: 2500}\n", window=2500)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."}]
    previous: list[dict[str, Any]] | None = None
    changed = 0
    said: list[str] = []
    for turn in range(80):
        messages.append({"role": "user", "content": question(turn)})
        response, calls = await gate.ask({"model": "chat", "messages": messages, "max_tokens": 200})
        assert response.status_code == 200, response.text
        messages.append(response.json()["choices"][0]["message"])
        await gate.settled()
        sent = [c for c in calls if c.max_tokens == 200][-1].messages
        if previous is not None and sent[: len(previous)] != previous:
            changed += 1
        previous = sent
        said.append(response.headers.get("x-overspill-prefix", "whole"))
    print(f"80 turns: the prefix changed {changed} times; {said.count('kept')} turns kept it")
    assert changed <= 10
    assert changed == sum(1 for word in said if word.startswith("changed-"))
    assert said.count("changed-growth") >= 5  # the conversation did grow, repeatedly
