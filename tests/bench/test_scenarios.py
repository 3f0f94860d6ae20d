"""The gateway bench's scenarios: their bodies, which targets serve them, what counts as answered."""

from __future__ import annotations

import orjson
import pytest

from bench.gateway import bodies, wire
from bench.gateway.scenarios import MODELS, ROUTE_WIRES, SCENARIOS, Scenario, matrix, pick
from bench.gateway.targets import TARGETS

ROUTES = {route.suffix: route for route in wire.routes(chunks=20)}


def mock_answer(scenario: Scenario) -> bytes:
    """What the mock sends for a scenario whose upstream speaks the client's wire."""
    route = next(r for suffix, r in ROUTES.items() if scenario.route.endswith(suffix))
    return b"".join(route.events) if scenario.stream and route.events else route.json


def test_sizes_match_the_reference_bodies() -> None:
    """small is 10 messages of ~2 KB in all, large 200 of ~213 KB, the same bytes every run."""
    small = bodies.body("chat", "small", "mock-model", False)
    large = bodies.body("chat", "large", "mock-model", False)
    assert len(orjson.loads(small)["messages"]) == 10
    assert len(orjson.loads(large)["messages"]) == 200
    assert 1_800 < len(small) < 2_800
    assert 190_000 < len(large) < 240_000
    assert bodies.body("chat", "large", "mock-model", False) == large


@pytest.mark.parametrize("shape", sorted(bodies.SHAPES))
def test_every_shape_names_its_model_and_stream(shape: str) -> None:
    """Each API's body carries the model, and `stream` where the API streams."""
    body = orjson.loads(bodies.body(shape, "small", "mock-model", True))
    assert body["model"] == "mock-model"
    assert body.get("stream", True) is True


def test_every_scenario_names_a_known_model_route_and_shape() -> None:
    """A scenario's model, route and shape are ones the configs, the mock and the bodies know."""
    models = {model.name for model in MODELS}
    for scenario in SCENARIOS:
        assert scenario.model in models
        assert scenario.route in ROUTE_WIRES
        assert scenario.shape in bodies.SHAPES


def test_byte_forwarders_serve_only_their_wire() -> None:
    """The passthroughs and `direct` skip scenarios whose upstream speaks another wire;
    overspill and the LiteLLM proxy serve them all."""
    anthropic = next(s for s in SCENARIOS if s.model == "mock-anthropic")
    openai = next(s for s in SCENARIOS if s.model == "mock-model")
    assert not TARGETS["passthrough"].serves(anthropic)
    assert TARGETS["passthrough"].serves(openai)
    assert TARGETS["overspill"].serves(anthropic)
    assert TARGETS["litellm"].serves(anthropic)


@pytest.mark.parametrize(
    "scenario",
    [
        *matrix("chat", "/v1/chat/completions", "chat"),
        *matrix("responses", "/v1/responses", "responses"),
        *matrix("completions", "/v1/completions", "completions"),
        *matrix("embeddings", "/v1/embeddings", "embeddings", streams=(False,)),
        *matrix("messages", "/v1/messages", "messages", model="mock-anthropic"),
    ],
    ids=lambda s: f"{s.route} {s.name}",
)
def test_the_mocks_answer_counts_as_answered(scenario: Scenario) -> None:
    """Every route's answer from the mock passes the scenario's check; a cut stream or an error
    does not."""
    answer = mock_answer(scenario)
    assert scenario.answered(200, answer, 20)
    assert not scenario.answered(500, answer, 20)
    if scenario.stream:
        assert not scenario.answered(200, answer[: len(answer) // 2], 20)


def test_pick_refuses_an_unknown_group() -> None:
    """A misspelt group is an error naming the known ones, not an empty run."""
    with pytest.raises(SystemExit, match="unknown scenario group"):
        pick(("chats",), ("small",), ("json",))
    assert [s.name for s in pick(("chat",), ("small",), ("json", "sse"))] == [
        "chat json small", "chat sse small",
    ]  # fmt: skip
