"""How many calls each deployment serves at once, and the queue overspill's own calls wait in.

A self-hosted server serves a few calls at once (llama-server's slots, Ollama's
OLLAMA_NUM_PARALLEL) and queues the rest inside itself, where a client's timeout keeps
running: four extraction calls sent at once to a one-slot llama-server each waited behind the
others and timed out. So overspill's own calls to a deployment wait in a queue here, at most
`slots` of them in flight at once, and each call's timeout (which the provider starts when it
sends) measures the upstream's work, not the queue. Clients' calls never wait here.

A deployment's slots, the first that says:

    litellm_params.max_parallel_requests     LiteLLM's setting, as configured
    llama-server's `GET <root>/props`        `total_slots` (asked once per server, 2 s)
    an Ollama deployment                     1 (set max_parallel_requests to the server's
                                             OLLAMA_NUM_PARALLEL when it is higher)
    another self-hosted server               1 (vLLM and others: configure it)
    a hosted API                             HOSTED_SLOTS

The time an own call waited is recorded per model (`overspill_own_call_wait_seconds`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from time import perf_counter

import httpx
import orjson

from kernel import metrics
from kernel.config import ModelEntry, is_ollama
from providers.model_info import self_hosted
from providers.ollama import api_base_of

log = logging.getLogger("overspill.parallelism")

HOSTED_SLOTS = 8
"""Own calls in flight at once to a hosted API (it serves many; this only spreads them)."""
SELF_HOSTED_SLOTS = 1
"""A self-hosted server that does not say: one at a time, the safe choice."""
PROBE_TIMEOUT_SECONDS = 2.0


@dataclass(slots=True)
class Lane:
    """One deployment's queue for own calls."""

    entry: ModelEntry
    slots: int | None = None
    """None until learned (on the first own call)."""
    source: str = ""
    _gate: asyncio.Semaphore | None = None
    _learning: asyncio.Lock = field(default_factory=asyncio.Lock)

    @asynccontextmanager
    async def own_call(self, lanes: Lanes) -> AsyncIterator[None]:
        """Hold one of the deployment's slots for an own call (waiting for one if needed)."""
        gate = self._gate or await self._learn(lanes)
        started = perf_counter()
        async with gate:
            metrics.own_call_waited(self.entry.model_name, perf_counter() - started)
            yield

    async def _learn(self, lanes: Lanes) -> asyncio.Semaphore:
        async with self._learning:
            if self._gate is None:
                self.slots, self.source = await lanes.slots_of(self.entry)
                self._gate = asyncio.Semaphore(self.slots)
                log.info(
                    "own calls to a deployment queue behind its parallelism",
                    extra={"model": self.entry.model_name, "slots": self.slots,
                           "source": self.source},
                )  # fmt: skip
            return self._gate


class Lanes:
    """Every deployment's queue, keyed by its provider (the router's unit)."""

    def __init__(self, client: httpx.AsyncClient | None = None) -> None:
        self._lanes: dict[int, Lane] = {}
        self._client = client
        self._own_client = client is None
        self._probed: dict[str, int | None] = {}

    def register(self, provider: object, entry: ModelEntry) -> None:
        """The deployment `provider` serves (done when the shell builds it)."""
        self._lanes[id(provider)] = Lane(entry)

    def of(self, provider: object) -> Lane | None:
        """The provider's lane (None: a provider the shell did not build, e.g. a test's)."""
        return self._lanes.get(id(provider))

    async def slots_of(self, entry: ModelEntry) -> tuple[int, str]:
        """How many calls `entry`'s deployment serves at once, and where that was learned."""
        configured = entry.litellm_params.max_parallel_requests
        if configured is not None:
            return configured, "config"
        if is_ollama(entry.litellm_params.model):
            return SELF_HOSTED_SLOTS, "ollama-default"
        if not self_hosted(entry):
            return HOSTED_SLOTS, "hosted-default"
        found = await self._props(api_base_of(entry))
        if found is not None:
            return found, "props"
        return SELF_HOSTED_SLOTS, "self-hosted-default"

    async def _props(self, root: str) -> int | None:
        """llama-server's `total_slots` from `GET <root>/props` (None: not llama-server, or
        it did not answer); asked once per server."""
        if root in self._probed:
            return self._probed[root]
        found: int | None = None
        try:
            client = self._client or self._make_client()
            response = await client.get(f"{root}/props", timeout=PROBE_TIMEOUT_SECONDS)
            if response.status_code == 200:
                found = total_slots(response.content)
        except httpx.HTTPError as exc:
            log.info("no slot count from the server", extra={"url": root, "error": str(exc)})
        self._probed[root] = found
        return found

    def _make_client(self) -> httpx.AsyncClient:
        self._client = httpx.AsyncClient()
        return self._client

    async def aclose(self) -> None:
        """Close the probe's client (when this object made it)."""
        if self._own_client and self._client is not None:
            await self._client.aclose()


def total_slots(body: bytes) -> int | None:
    """`total_slots` of a llama-server `/props` answer, when it is a positive integer."""
    try:
        found = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    value = found.get("total_slots") if isinstance(found, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None
