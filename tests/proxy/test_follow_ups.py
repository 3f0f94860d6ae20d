"""Work a layer asks for after the response runs as a background job, once the answer left."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import ClassVar

import httpx

from kernel.services import Services
from kernel.store import DiskHistoryStore
from kernel.types import ChatRequest, ChatResponse, Next, RequestContext
from middleware.pipeline import LAYERS
from providers.fake import json_response, sse_events
from proxy.app import create_app
from proxy.system import System, build_system
from tests.conftest import settings_from

CHAT = {"model": "local", "messages": [{"role": "user", "content": "hi"}]}


class Recorder:
    """A provider that records when its answer is produced (each streamed chunk too)."""

    name = "recorder"

    def __init__(self, order: list[str]) -> None:
        self.order = order

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        self.order.append("answer")
        if not request.stream:
            return json_response("hello")

        async def chunks() -> AsyncIterator[bytes]:
            for event in sse_events(["hel", "lo"]):
                self.order.append("chunk")
                yield event

        return ChatResponse(stream=chunks())

    async def aclose(self) -> None:
        return None


def probe_layer(order: list[str]) -> type:
    """A conversation layer that asks for one follow-up per request."""

    class Probe:
        name: ClassVar[str] = "history_splice"

        def __init__(self, services: Services) -> None:
            self.services = services

        async def handle(
            self, request: ChatRequest, ctx: RequestContext, call_next: Next
        ) -> ChatResponse:
            async def follow_up() -> None:
                order.append("job")

            ctx.after_response("probe", follow_up)
            return await call_next(request, ctx)

    return Probe


def app_with(store: DiskHistoryStore, order: list[str]) -> tuple[System, httpx.AsyncClient]:
    system = build_system(
        settings_from(),
        providers={"local": [Recorder(order)]},
        registry={**LAYERS, "history_splice": probe_layer(order)},
        store=store,
    )
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(system)),
        base_url="http://overspill.test",
        headers={"authorization": "Bearer sk-master"},
    )
    return system, client


async def test_a_json_answer_starts_the_follow_up_after_it(store: DiskHistoryStore) -> None:
    """The follow-up is one of the system's jobs, started once the JSON body exists."""
    order: list[str] = []
    system, client = app_with(store, order)
    async with client:
        response = await client.post("/v1/chat/completions", json=CHAT)
    assert response.status_code == 200
    await system.aclose(grace=30)
    assert order == ["answer", "job"]


async def test_a_stream_starts_the_follow_up_after_its_last_byte(store: DiskHistoryStore) -> None:
    """A streamed answer's follow-up starts only after the relay sent the last chunk."""
    order: list[str] = []
    system, client = app_with(store, order)
    async with client:
        response = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    assert response.status_code == 200
    assert response.text.rstrip().endswith("[DONE]")
    await system.aclose(grace=30)
    assert order[0] == "answer"
    assert order[-1] == "job"
    assert order.count("chunk") == len(sse_events(["hel", "lo"]))
