"""The app over a failing store: chat requests are served without it in bounded time, admin
answers a JSON 503, and replicas sharing one Redis extract a conversation once."""

from __future__ import annotations

import asyncio
import logging
import secrets
import signal
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import httpx
import pytest

from kernel.services import Services
from kernel.store import HistoryStore
from kernel.store_redis import RedisHistoryStore
from kernel.types import ChatRequest, ChatResponse, Next, RequestContext
from providers.failures import classify_failure
from providers.fake import ScriptedProvider, json_response
from proxy.app import create_app
from proxy.system import System, build_system
from tests.conftest import BASIC_CONFIG, settings_from
from tests.proxy.test_metrics import CHAT, OVERFLOW_TEXT, conversation

pytestmark = pytest.mark.reliability("store")

DEADLINE_SECONDS = 10.0
UNKNOWN_WINDOW = BASIC_CONFIG.replace("    context: {window: 2048}\n", "")
"""The basic config with no window for `local`: its first overflow is how compaction starts."""
"""The outer bound on a request against a stalled store (it needs ~timeout_seconds)."""
KEY = {"authorization": "Bearer sk-master"}


@pytest.fixture
async def systems() -> AsyncIterator[list[System]]:
    """Systems the test builds, closed at its end (their stores too)."""
    built: list[System] = []
    yield built
    for system in built:
        await system.aclose(0)


def client_for(system: System) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=create_app(system))
    return httpx.AsyncClient(transport=transport, base_url="http://o.test", headers=KEY)


def overflowing() -> ScriptedProvider:
    """Overflows once, then answers (the extraction, then the condensed retry)."""
    overflow = classify_failure(status=400, message=OVERFLOW_TEXT, provider="openai")
    return ScriptedProvider([overflow, json_response("- The user planned a trip.")])


def stalled_store(url: str) -> RedisHistoryStore:
    return RedisHistoryStore(
        url, key_prefix=f"t-{secrets.token_hex(4)}:", timeout_seconds=0.2, retry_after=3600
    )


@pytest.mark.parametrize("fault", ["stalled", "dead"])
async def test_a_long_conversation_is_served_while_redis_is_stalled_or_dead(
    fault: str,
    own_redis: tuple[subprocess.Popen[str], str],
    systems: list[System],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Redis SIGSTOPped or killed: an overflowing conversation is condensed and answered."""
    process, url = own_redis
    system = build_system(
        settings_from(UNKNOWN_WINDOW),
        providers={"local": [overflowing()]},
        store=stalled_store(url),
    )
    systems.append(system)
    if fault == "stalled":
        process.send_signal(signal.SIGSTOP)
    else:
        process.kill()
        process.wait(timeout=DEADLINE_SECONDS)
    try:
        with caplog.at_level(logging.ERROR, logger="overspill"):
            async with client_for(system) as client, asyncio.timeout(DEADLINE_SECONDS):
                answer = await client.post(
                    "/v1/chat/completions",
                    json={"model": "local", "messages": conversation(12)},
                    headers={"x-conversation-id": "trip"},
                )
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-overspill-action"] == "extracted"
    assert answer.headers["x-overspill-attempts"] == "2"
    assert "history store unavailable" in caplog.text


async def test_admin_endpoints_answer_json_503_when_redis_is_down(
    own_redis: tuple[subprocess.Popen[str], str], systems: list[System]
) -> None:
    """Redis killed: every admin route answers 503 store_unavailable in OpenAI's error shape."""
    process, url = own_redis
    system = build_system(settings_from(), providers={}, store=stalled_store(url))
    systems.append(system)
    process.kill()
    process.wait(timeout=DEADLINE_SECONDS)
    async with client_for(system) as client, asyncio.timeout(DEADLINE_SECONDS):
        answers = [
            await client.get("/overspill/conversations"),
            await client.get("/overspill/conversations/c?tenant=t"),
            await client.delete("/overspill/conversations/c?tenant=t"),
            await client.delete("/overspill/conversations"),
        ]
        ready = await client.get("/health/readiness")
    for answer in answers:
        assert answer.status_code == 503, answer.text
        assert answer.headers["content-type"] == "application/json"
        error = answer.json()["error"]
        assert error["code"] == "store_unavailable"
        assert error["type"] == "service_unavailable_error"
        assert "general_settings.store" in error["message"]
    assert ready.status_code == 503
    assert ready.json()["status"] == "unavailable"


class NeedsTheStore:
    """A layer that cannot go on without the store (none of overspill's own is one)."""

    name: ClassVar[str] = "needs_store"

    def __init__(self, services: Services) -> None:
        self.store = services.store

    async def handle(
        self, request: ChatRequest, ctx: RequestContext, call_next: Next
    ) -> ChatResponse:
        await self.store.get(ctx.tenant, ctx.conversation_id)
        return await call_next(request, ctx)


async def test_a_request_that_needs_the_store_gets_a_json_503(
    own_redis: tuple[subprocess.Popen[str], str], systems: list[System]
) -> None:
    """A StoreError no layer absorbs is 503 store_unavailable, never a 500 or a hang."""
    process, url = own_redis
    text = "model_list: [{model_name: local, litellm_params: {model: openai/m}}]\n"
    system = build_system(
        settings_from(text + "middleware: [needs_store]\n"),
        providers={"local": [ScriptedProvider([json_response("hi")])]},
        store=stalled_store(url),
        registry={"needs_store": NeedsTheStore},
    )
    systems.append(system)
    process.kill()
    process.wait(timeout=DEADLINE_SECONDS)
    async with client_for(system) as client, asyncio.timeout(DEADLINE_SECONDS):
        answer = await client.post("/v1/chat/completions", json=CHAT)
    assert answer.status_code == 503
    assert answer.json()["error"]["code"] == "store_unavailable"
    assert "127.0.0.1" not in answer.text  # where the store lives is the operator's business


@dataclass
class Shared:
    """What the replicas' upstreams have in common: counts and the gate of the extraction."""

    expected: int
    overflows: int = 0
    extractions: int = 0
    """Extraction calls (one extraction of a long history makes several)."""
    everyone_overflowed: asyncio.Event = field(default_factory=asyncio.Event)
    arrived: int = 0
    everyone_arrived: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once every request's first call is at the upstream: none of them can have seen the
    window an overflow states (the router learns it) before it overflowed itself."""


class Upstream:
    """A model that overflows on the whole conversation, extracts (once everyone overflowed,
    so every request is in recovery at the same time) and answers a condensed one."""

    name = "fake"

    def __init__(self, shared: Shared, whole: int) -> None:
        self.shared = shared
        self.whole = whole

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        if ctx.tenant == "internal":
            self.shared.extractions += 1
            await self.shared.everyone_overflowed.wait()
            return json_response("- The user planned a trip.")
        if len(request.messages) >= self.whole:
            self.shared.arrived += 1
            if self.shared.arrived == self.shared.expected:
                self.shared.everyone_arrived.set()
            await self.shared.everyone_arrived.wait()
            self.shared.overflows += 1
            if self.shared.overflows == self.shared.expected:
                self.shared.everyone_overflowed.set()
            raise classify_failure(status=400, message=OVERFLOW_TEXT, provider="openai")
        return json_response("You planned a trip.")

    async def aclose(self) -> None:
        """Nothing to release."""


async def test_concurrent_overflows_on_two_replicas_extract_once(
    redis_url: str, systems: list[System]
) -> None:
    """Six overflows of one conversation, three per replica over one Redis: one extraction."""
    messages = conversation(12)
    shared = Shared(expected=6)
    prefix = f"t-{secrets.token_hex(4)}:"
    for _ in range(2):
        store: HistoryStore = RedisHistoryStore(redis_url, key_prefix=prefix)
        upstream = Upstream(shared, whole=len(messages))
        settings = settings_from(UNKNOWN_WINDOW)  # fail-first: the overflows are what is tested
        systems.append(build_system(settings, providers={"local": [upstream]}, store=store))
    clients = [client_for(system) for system in systems]

    async def ask(client: httpx.AsyncClient) -> httpx.Response:
        body: dict[str, Any] = {"model": "local", "messages": messages}
        return await client.post(
            "/v1/chat/completions", json=body, headers={"x-conversation-id": "shared"}
        )

    try:
        async with asyncio.timeout(DEADLINE_SECONDS * 3):
            answers = await asyncio.gather(*(ask(clients[i % 2]) for i in range(6)))
    finally:
        for client in clients:
            await client.aclose()
    assert [answer.status_code for answer in answers] == [200] * 6
    actions = sorted(answer.headers["x-overspill-action"] for answer in answers)
    assert actions == ["extracted", *["reused"] * 5]
    calls = [int(answer.headers["x-overspill-extraction-calls"]) for answer in answers]
    assert shared.extractions == sum(calls)  # every extraction call was the one extraction's
