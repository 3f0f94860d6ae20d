"""The gateway bench's scenarios, as data: adding a route or a provider's wire is one entry.

A scenario is a route the client calls, a body shape and size, streamed or not, and the model
it names; the model decides which upstream wire answers (`MODELS`: the same model list is
written into overspill's config and the LiteLLM proxy's). The reference passthroughs and the
`direct` target forward bytes, so they only run scenarios whose upstream speaks the client's
wire.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.gateway.bodies import SIZES


@dataclass(frozen=True)
class Model:
    """A model name the bench's configs route, and how."""

    name: str
    litellm_model: str
    """`litellm_params.model`: the provider prefix picks the upstream wire."""
    wire: str
    """The mock's wire that answers it: `openai` or `anthropic`."""
    overspill_entry: str = ""
    """A setting of overspill's model entry, beside `litellm_params` (a YAML line), for
    overspill only."""


MODELS = (
    Model("mock-model", "openai/mock-model", "openai"),
    Model("mock-anthropic", "anthropic/mock-model", "anthropic"),
    Model("mock-litellm-road", "openai/mock-model", "openai", "passthrough: false"),
    Model("mock-responses", "openai/mock-model", "openai", "responses_api: native"),
)
"""`mock-litellm-road`: an OpenAI-wire model that overspill sends through litellm (no byte
passthrough), the road of every provider without overspill's own translation.
`mock-responses`: one whose upstream serves the Responses API itself (overspill's native road;
`mock-model` reaches the same upstream's chat completions for a Responses request)."""

ROUTE_WIRES = {
    "/v1/chat/completions": "openai",
    "/v1/completions": "openai",
    "/v1/embeddings": "openai",
    "/v1/responses": "openai",
    "/v1/messages": "anthropic",
}
"""The wire a client speaks on each route."""

STREAM_ENDS = {"openai": b"data: [DONE]", "anthropic": b"event: message_stop"}
"""What the last event of a stream on each client wire starts with (Responses: below)."""


@dataclass(frozen=True)
class Scenario:
    """One request shape the load generator sends, over and over."""

    group: str
    route: str
    shape: str
    """A body shape of `bench.gateway.bodies.SHAPES`."""
    size: str
    stream: bool
    model: str
    rate: float
    """Requests per second of the latency run: low enough that no target queues."""

    @property
    def name(self) -> str:
        return f"{self.group} {'sse' if self.stream else 'json'} {self.size}"

    @property
    def body_file(self) -> str:
        return f"{self.shape}-{self.size}-{'sse' if self.stream else 'json'}-{self.model}.json"

    @property
    def upstream_wire(self) -> str:
        return next(model.wire for model in MODELS if model.name == self.model)

    @property
    def same_wire(self) -> bool:
        """Whether the upstream speaks the client's wire (a byte forwarder can serve it)."""
        return ROUTE_WIRES[self.route] == self.upstream_wire

    def answered(self, status: int, data: bytes, chunks: int) -> bool:
        """Whether an answer is this scenario's: 200, the mock's text, a stream's last event."""
        if status != 200:
            return False
        if self.shape == "embeddings":
            return b'"embedding"' in data
        if b"tok0" not in data or f"tok{chunks - 1}".encode() not in data:
            return False
        if not self.stream:
            return True
        events = [line for line in data.split(b"\n") if line.strip()]
        if self.route == "/v1/responses":
            return any(line.startswith(b"event: response.completed") for line in events)
        return any(line.startswith(STREAM_ENDS[ROUTE_WIRES[self.route]]) for line in events)


RATES = {"small": 10.0, "large": 4.0}


def matrix(
    group: str,
    route: str,
    shape: str,
    model: str = "mock-model",
    streams: tuple[bool, ...] = (False, True),
) -> list[Scenario]:
    """A route's scenarios: JSON and SSE (`streams`) x each body size."""
    return [
        Scenario(group, route, shape, size, stream, model, RATES[size])
        for stream in streams
        for size in SIZES
    ]


SCENARIOS = (
    *matrix("chat", "/v1/chat/completions", "chat"),
    *matrix("chat-anthropic", "/v1/chat/completions", "chat", model="mock-anthropic"),
    *matrix("chat-litellm-road", "/v1/chat/completions", "chat", model="mock-litellm-road"),
    *matrix("responses", "/v1/responses", "responses", model="mock-responses"),
    *matrix("responses-translated", "/v1/responses", "responses"),
)
"""Every scenario the bench knows. `make bench` runs the groups `chat`, `responses` (the native
road) and `responses-translated` (through chat completions); --groups picks others.
A new route is one line, e.g. `*matrix("responses", "/v1/responses", "responses")` or
`*matrix("embeddings", "/v1/embeddings", "embeddings", streams=(False,))`."""

DEFAULT_GROUPS = ("chat", "responses", "responses-translated")


def pick(groups: tuple[str, ...], sizes: tuple[str, ...], modes: tuple[str, ...]) -> list[Scenario]:
    """The scenarios of these groups, body sizes and modes (`json`, `sse`), in table order."""
    known = {scenario.group for scenario in SCENARIOS}
    unknown = sorted(set(groups) - known)
    if unknown:
        raise SystemExit(f"unknown scenario group {unknown}: known {sorted(known)}")
    return [
        scenario
        for scenario in SCENARIOS
        if scenario.group in groups
        and scenario.size in sizes
        and ("sse" if scenario.stream else "json") in modes
    ]
