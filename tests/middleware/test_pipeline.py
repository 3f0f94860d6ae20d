"""Layers compose in config order, pass requests through untouched, and may change copies."""

from __future__ import annotations

from typing import ClassVar

import orjson
import pytest

from kernel.config import Settings
from kernel.services import Services
from kernel.store import DiskHistoryStore
from kernel.types import ChatRequest, ChatResponse, Layer, Next, RequestContext
from middleware.pipeline import (
    LAYERS,
    RECOMMENDED,
    LayerFactory,
    MiddlewareError,
    build_pipeline,
    compose,
)
from providers.fake import ScriptedProvider, json_response
from tests.conftest import BASIC_CONFIG, AppClient, make_services, settings_from
from tests.middleware.layers.test_ollama_window import Extractor

USER = {"role": "user", "content": "hi"}


class Recorder:
    """A layer that logs when it sees the request and the response."""

    name: ClassVar[str] = "recorder"

    def __init__(self, label: str, trail: list[str]) -> None:
        self.label = label
        self.trail = trail

    async def handle(
        self, request: ChatRequest, ctx: RequestContext, call_next: Next
    ) -> ChatResponse:
        self.trail.append(f"{self.label}>")
        response = await call_next(request, ctx)
        self.trail.append(f"<{self.label}")
        ctx.note(self.label, "seen")
        return response


class Prepend:
    """A layer that adds a system message to a copy of the request."""

    name: ClassVar[str] = "prepend"

    async def handle(
        self, request: ChatRequest, ctx: RequestContext, call_next: Next
    ) -> ChatResponse:
        system = {"role": "system", "content": "be brief"}
        return await call_next(request.with_messages([system, *request.messages]), ctx)


async def test_layers_run_outermost_first() -> None:
    """layers[0] sees the request first and the response last."""
    trail: list[str] = []

    async def endpoint(request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        trail.append("endpoint")
        return json_response("ok")

    layers: list[Layer] = [Recorder("a", trail), Recorder("b", trail)]
    handler = compose(layers, endpoint)
    request = ChatRequest("m", (USER,), False, {"model": "m", "messages": [USER]})
    await handler(request, RequestContext("r", "t"))
    assert trail == ["a>", "b>", "endpoint", "<b", "<a"]


def services(settings: Settings, store: DiskHistoryStore) -> Services:
    return make_services(settings, store, lambda name: Extractor(), {})


async def endpoint(request: ChatRequest, ctx: RequestContext) -> ChatResponse:
    return json_response("ok")


def test_layers_are_built_from_config_in_order(store: DiskHistoryStore) -> None:
    """`middleware:` names select factories from the registry, in the file's order."""
    trail: list[str] = []
    registry = {
        "first": lambda s: Recorder("first", trail),
        "second": lambda s: Recorder("second", trail),
    }
    settings = settings_from().model_copy(update={"middleware": ("second", "first")})
    pipeline = build_pipeline(services(settings, store), endpoint, registry)
    assert pipeline.names == ("second", "first")


def test_unknown_layer_names_its_position(store: DiskHistoryStore) -> None:
    """A name with no factory is refused with its YAML path and the known names."""
    settings: Settings = settings_from().model_copy(update={"middleware": ("nope",)})
    with pytest.raises(
        MiddlewareError, match=r"middleware\[0\]: unknown layer 'nope' \(known: x\)"
    ):
        build_pipeline(services(settings, store), endpoint, {"x": lambda s: Prepend()})


def test_no_middleware_key_runs_the_recommended_layers(store: DiskHistoryStore) -> None:
    """Without `middleware:` every recommended layer runs; `middleware: []` runs none."""
    assert settings_from().middleware is None
    assert build_pipeline(services(settings_from(), store), endpoint).names == RECOMMENDED
    assert RECOMMENDED == (
        "documents", "observation_masking", "history_splice", "overflow_recovery",
        "ollama_window",
    )  # fmt: skip
    none = settings_from(BASIC_CONFIG + "middleware: []\n")
    assert build_pipeline(services(none, store), endpoint).names == ()


async def test_overspills_own_calls_go_through_the_model_layers_only(
    store: DiskHistoryStore,
) -> None:
    """The model pipeline holds the model layers (ollama_window), never the conversation ones."""
    trail: list[str] = []

    def recorder(label: str) -> LayerFactory:
        return lambda services: Recorder(label, trail)

    registry = {name: recorder(name) for name in LAYERS} | {"ollama_window": recorder("model")}
    pipeline = build_pipeline(services(settings_from(), store), endpoint, registry)
    request = ChatRequest("m", (USER,), False, {"model": "m", "messages": [USER]})
    await pipeline.model(request, RequestContext("internal-r", "internal"))
    assert trail == ["model>", "<model"]


async def test_empty_pipeline_forwards_the_clients_bytes(app_client: AppClient) -> None:
    """With no layers the provider receives the very bytes the client sent."""
    fake = ScriptedProvider([json_response("ok")])
    client = app_client({"local": [fake]})
    raw = b'{"model": "local", "messages": [{"role": "user", "content": "hi"}], "seed": 3}'
    response = await client.post("/v1/chat/completions", content=raw)
    assert response.status_code == 200
    assert fake.requests[0].raw == raw


async def test_configured_layers_act_and_report(app_client: AppClient) -> None:
    """Layers from config change copies of the request and their notes become headers."""
    trail: list[str] = []
    fake = ScriptedProvider([json_response("ok")])
    registry = {"recorder": lambda s: Recorder("recorder", trail), "prepend": lambda s: Prepend()}
    settings = settings_from().model_copy(update={"middleware": ("recorder", "prepend")})
    client = app_client({"local": [fake]}, settings=settings, registry=registry)
    response = await client.post(
        "/v1/chat/completions", json={"model": "local", "messages": [USER]}
    )
    assert response.headers["x-overspill-recorder"] == "seen"
    sent = orjson.loads(fake.requests[0].render("local"))
    assert [m["role"] for m in sent["messages"]] == ["system", "user"]
    assert trail == ["recorder>", "<recorder"]


@pytest.mark.parametrize("outer", ["overflow_recovery", "history_splice", "documents"])
def test_model_layers_must_come_after_conversation_layers(
    store: DiskHistoryStore, outer: str
) -> None:
    """ollama_window outside a conversation layer would miss what that layer sends."""
    settings = settings_from().model_copy(update={"middleware": ("ollama_window", outer)})
    with pytest.raises(MiddlewareError, match=f"ollama_window must come after {outer}"):
        build_pipeline(services(settings, store), endpoint)
