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
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from kernel.estimator import Estimator
from kernel.spending import DEFAULT_OWN_CALLS, DEFAULT_OWN_WINDOWS
from kernel.store import DiskHistoryStore
from kernel.store_redis import RedisHistoryStore
from middleware.condensing.budget import budget_for
from proxy.app import create_app
from proxy.system import System, build_system
from tests.conftest import running, sample, settings_from
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
    again, calls = await gate.ask({**body, "documents": documents[:5]})
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
    """64 long conversations sent at once (each past its window's grow_at): each request stays
    within its own bound and is answered, while their own calls share the one slot the
    server has; then 64 more turns ask for background growths, which wait in a bounded queue
    (the ones past it are dropped and counted, never run)."""
    gate: Gateway = await gateway(
        model="    context: {window: 2048}\n",
        general="  max_background_jobs: 2\n  max_waiting_jobs: 16\n",
        window=2048,
    )
    bodies = [{"model": "chat", "messages": long_history(40, seed)} for seed in range(64)]
    answers = await asyncio.gather(
        *(gate.ask(body, **{"x-conversation-id": f"c{n}"}) for n, body in enumerate(bodies))
    )
    for response, _ in answers:
        assert response.status_code == 200
        assert int(response.headers.get("x-overspill-spent-calls", "0")) <= DEFAULT_OWN_CALLS
        assert int(response.headers.get("x-overspill-spent-tokens-in", "0")) <= 4 * 2048
    spent = [int(r.headers.get("x-overspill-spent-calls", "0")) for r, _ in answers]
    assert sum(spent) == len(own(gate.upstream.calls))
    print(
        f"64 conversations: {len(gate.upstream.calls)} upstream calls ({sum(spent)} own, at "
        f"most {max(spent)} for one request), {gate.upstream.tokens_in()} tokens in"
    )
    history = await due_history(gate)
    near = [{"model": "chat", "messages": history} for _ in range(64)]
    dropped = sample("overspill_background_jobs_dropped_total", reason="queue_full")
    answers = await asyncio.gather(*(gate.ask(body, **{"x-conversation-id": f"g{n}"})
                                     for n, body in enumerate(near)))  # fmt: skip
    assert all(r.headers.get("x-overspill-compaction") == "scheduled" for r, _ in answers)
    jobs = gate.system.jobs
    print(f"64 growths asked for: {len(jobs) - jobs.waiting} running, {jobs.waiting} waiting")
    assert len(jobs) - jobs.waiting <= 2
    assert jobs.waiting <= 16
    assert sample("overspill_background_jobs_dropped_total", reason="queue_full") >= dropped + 46
    await gate.settled()


async def due_history(gate: Gateway) -> list[dict[str, Any]]:
    """A history at 84% of the model's prompt budget (as overspill estimates it now): past
    compact_at, within a turn of grow_at, so its turn asks for a background growth."""
    entry = gate.system.entries["chat"]
    estimator = Estimator(gate.system.store)
    scale = await estimator.scale(entry)
    limit = budget_for(entry, 2048, {}).prompt_limit
    turns = 1
    while estimator.count(entry, long_history(turns + 1)) * scale < 0.84 * limit:
        turns += 1
    return long_history(turns)


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


async def test_own_calls_to_a_one_slot_server_go_one_at_a_time(gateway: GatewayFactory) -> None:
    """A llama-server with one slot (its `/props`): an extraction of several chunks sends its
    calls one after another, never two at once, so no call's timeout runs while it queues."""
    gate: Gateway = await gateway(model="    context: {window: 2048}\n", window=2048)
    gate.upstream.total_slots = 1
    response, calls = await gate.ask({"model": "chat", "messages": long_history(120)})
    assert response.status_code == 200
    mine = own(calls)
    print(f"{len(mine)} own calls, at most {gate.upstream.most_in_flight} in flight at once")
    assert len(mine) >= 3
    assert gate.upstream.most_in_flight == 1
    assert gate.upstream.props_asked == 1


async def test_shadow_mode_sends_the_request_unchanged_and_says_what_it_would_do(
    gateway: GatewayFactory,
) -> None:
    """`context.shadow`: a conversation past grow_at goes upstream as the client sent it, no
    own call is made, nothing is stored, and the layers say what they would have done."""
    gate: Gateway = await gateway(model="    context: {window: 8192, shadow: true}\n")
    messages = long_history(400)
    grown = sample("overspill_shadow_decisions_total", model="chat", layer="history_splice",
                   decision="would-grow-now")  # fmt: skip
    response, calls = await gate.ask({"model": "chat", "messages": messages})
    assert response.status_code == 400  # the scripted window refuses it, as it would directly
    assert response.json()["error"]["code"] == "context_length_exceeded"
    assert [call.messages for call in calls] == [messages]
    assert response.headers["x-overspill-shadow-history_splice"].startswith("would-grow-now")
    assert response.headers["x-overspill-shadow-overflow_recovery"].startswith("would-recover")
    assert "x-overspill-spent-calls" not in response.headers
    assert await gate.system.store.entries() == []
    assert sample("overspill_shadow_decisions_total", model="chat", layer="history_splice",
                  decision="would-grow-now") == grown + 1  # fmt: skip


async def test_a_shadow_key_gets_its_documents_whole_and_the_plan_reported(
    gateway: GatewayFactory,
) -> None:
    """A client key with `shadow: true`: its documents go as one plain batch, whole and in
    order, and the documents layer reports the placement it would have made."""
    gate: Gateway = await gateway(
        model=f"    context: {{window: {WINDOW}}}\n",
        general="  client_keys:\n    - {name: trial, key: sk-trial, shadow: true}\n",
    )
    documents = [{"id": f"d{i}", "text": prose(i, 2_000), "score": i} for i in range(6)]
    body = {"model": "chat", "messages": [{"role": "user", "content": "Which item costs most?"}],
            "documents": documents}  # fmt: skip
    response, calls = await gate.ask(body, authorization="Bearer sk-trial")
    assert response.status_code == 200
    (call,) = calls
    batch = str(call.messages[0]["content"])
    assert [batch.index(f"id: d{i}") for i in range(6)] == sorted(
        batch.index(f"id: d{i}") for i in range(6)
    )  # the order sent, not ranked
    assert all(str(doc["text"]) in batch for doc in documents)
    assert response.headers["x-overspill-shadow-documents"].startswith("would-append 6/6")
    assert "x-overspill-documents" not in response.headers


async def test_a_tenant_past_its_budget_gets_the_cheaper_road_and_the_usage_says_why(
    gateway: GatewayFactory, tmp_path: Path
) -> None:
    """With `usage.tenant_budget`, a tenant's own tokens are counted per day: once spent,
    its next long history is masked or cut with no model call (bound tenant-budget), and the
    usage endpoint reports what the upstream received for it, by model."""
    gate: Gateway = await gateway(
        model=f"    context: {{window: {WINDOW}}}\n",
        general="  usage: {tenant_budget: 3000}\n",
    )
    first, calls = await gate.ask({"model": "chat", "messages": long_history(400, 1)})
    assert first.status_code == 200
    mine = own(calls)
    assert mine
    second, calls = await gate.ask({"model": "chat", "messages": long_history(400, 2)},
                                   **{"x-conversation-id": "other"})  # fmt: skip
    assert second.status_code == 200
    assert own(calls) == []
    assert second.headers["x-overspill-bound"] == "tenant-budget"
    assert second.headers["x-overspill-bound-roads"].startswith("history:")
    report = (await gate.client.get("/overspill/usage")).json()
    ((row,), (tenant,)) = report["data"], report["tenants"]
    assert row["calls"] == len(mine)
    assert row["prompt_tokens"] == sum(call.prompt_tokens for call in mine)
    assert row["completion_tokens"] == sum(call.completion_tokens for call in mine)
    assert tenant["budget"] == 3000
    assert tenant["left_this_period"] == 3000 - row["tokens"]
    refused = await gate.client.get("/overspill/usage", params={"from": "yesterday"})
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "from"
    anonymous = await gate.client.get("/overspill/usage", headers={"authorization": ""})
    assert anonymous.status_code == 401


async def test_a_tenant_budget_in_redis_holds_across_replicas(redis_url: str) -> None:
    """Two replicas sharing one Redis: what one spent for a tenant counts against the budget
    the other checks, so the tenant's next long history there takes the cheaper road."""
    prefix = f"t-{secrets.token_hex(4)}:"
    async with WindowedUpstream(window=WINDOW) as upstream:
        config = settings_from(
            "model_list:\n  - model_name: chat\n    litellm_params: "
            f'{{model: openai/scripted-model, api_base: "{upstream.base_url}"}}\n'
            f"    context: {{window: {WINDOW}}}\n"
            "general_settings:\n  master_key: sk-master\n  usage: {tenant_budget: 3000}\n"
        )
        systems = [
            build_system(config, store=RedisHistoryStore(redis_url, key_prefix=prefix))
            for _ in range(2)
        ]
        clients = [
            httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(system)),
                              base_url="http://overspill.test", timeout=120,
                              headers={"authorization": "Bearer sk-master"})
            for system in systems
        ]  # fmt: skip
        try:
            first = await clients[0].post(
                "/v1/chat/completions", json={"model": "chat", "messages": long_history(400, 1)}
            )
            spent = int(first.headers["x-overspill-spent-tokens-in"])
            assert spent > 0
            before = len(upstream.calls)
            second = await clients[1].post(
                "/v1/chat/completions",
                json={"model": "chat", "messages": long_history(400, 2)},
                headers={"x-conversation-id": "other"},
            )
            assert second.status_code == 200
            assert own(upstream.calls[before:]) == []
            assert second.headers["x-overspill-bound"] == "tenant-budget"
            report = (await clients[1].get("/overspill/usage")).json()
            assert report["data"][0]["prompt_tokens"] == spent
        finally:
            for client in clients:
                await client.aclose()
            for system in systems:
                await system.aclose()
