"""How many calls each deployment serves at once, and the queue overspill's own calls wait in.

A self-hosted server serves a few calls at once (llama-server's slots, Ollama's
OLLAMA_NUM_PARALLEL) and queues the rest inside itself, where a client's timeout keeps
running: four extraction calls sent at once to a one-slot llama-server each waited behind the
others and timed out. So overspill's own calls to a deployment wait in a queue here, at most
`slots` of them in flight at once, and each call's timeout (which the provider starts when it
sends) measures the upstream's work, not the queue. Clients' calls never wait here.

A deployment's slots, the first that says:

    litellm_params.max_parallel_requests     LiteLLM's setting, as configured
    llama-server's `GET <root>/props`        `total_slots` (asked once per server, in the
                                             background on the first own call, at most 2 s;
                                             meanwhile one at a time)
    an Ollama deployment                     1 (set max_parallel_requests to the server's
                                             OLLAMA_NUM_PARALLEL when it is higher)
    another self-hosted server               1 (vLLM and others: configure it)
    a hosted API                             HOSTED_SLOTS

The time an own call waited is recorded per model (`overspill_own_call_wait_seconds`).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from time import perf_counter

import httpx
import orjson

from kernel import metrics
from kernel.config import ModelEntry, is_ollama
from kernel.json_values import is_int
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
    """None until the first own call decides (a probe may raise it later)."""
    source: str = ""
    _gate: asyncio.Semaphore | None = None

    @asynccontextmanager
    async def own_call(self, lanes: Lanes) -> AsyncIterator[None]:
        """Hold one of the deployment's slots for an own call (waiting for one if needed)."""
        gate = self._gate or self._open(lanes)
        started = perf_counter()
        async with gate:
            metrics.own_call_waited(self.entry.model_name, perf_counter() - started)
            yield

    def _open(self, lanes: Lanes) -> asyncio.Semaphore:
        """The queue, sized now from what is known; a self-hosted server that does not say is
        asked (`/props`) in the background, never on an own call's way."""
        self.slots, self.source = lanes.known_slots(self.entry)
        self._gate = asyncio.Semaphore(self.slots)
        if self.source == "self-hosted-default":
            lanes.probe(self)
        self._logged()
        return self._gate

    def resize(self, slots: int, source: str) -> None:
        """Take the server's own count (calls already in flight finish on the old queue)."""
        if slots != self.slots:
            self.slots, self.source = slots, source
            self._gate = asyncio.Semaphore(slots)
            self._logged()

    def _logged(self) -> None:
        log.info("own calls to a deployment queue behind its parallelism",
                 extra={"model": self.entry.model_name, "slots": self.slots,
                        "source": self.source})  # fmt: skip


class Lanes:
    """Every deployment's queue, keyed by its provider (the router's unit)."""

    def __init__(self, client: httpx.AsyncClient | None = None) -> None:
        self._lanes: weakref.WeakKeyDictionary[object, Lane] = weakref.WeakKeyDictionary()
        """Held weakly: a provider the system forgot (a wildcard's name) takes its lane along."""
        self._client = client
        self._own_client = client is None
        self._probed: dict[str, int | None] = {}
        self._probes: set[asyncio.Task[None]] = set()

    def register(self, provider: object, entry: ModelEntry) -> None:
        """The deployment `provider` serves (done when the shell builds it)."""
        self._lanes[provider] = Lane(entry)

    def of(self, provider: object) -> Lane | None:
        """The provider's lane (None: a provider the shell did not build, e.g. a test's)."""
        return self._lanes.get(provider)

    def known_slots(self, entry: ModelEntry) -> tuple[int, str]:
        """How many calls `entry`'s deployment serves at once as far as config and kind tell,
        and where that comes from (`self-hosted-default`: the server may say better)."""
        configured = entry.litellm_params.max_parallel_requests
        if configured is not None:
            return configured, "config"
        if is_ollama(entry.litellm_params.model):
            return SELF_HOSTED_SLOTS, "ollama-default"
        if not self_hosted(entry):
            return HOSTED_SLOTS, "hosted-default"
        return SELF_HOSTED_SLOTS, "self-hosted-default"

    def probe(self, lane: Lane) -> None:
        """Ask the lane's server for its slots in the background (resized when it says)."""

        async def ask() -> None:
            found = await self._props(api_base_of(lane.entry))
            if found is not None:
                lane.resize(found, "props")

        task = asyncio.get_running_loop().create_task(ask(), name="slots probe")
        self._probes.add(task)
        task.add_done_callback(self._probes.discard)

    async def _props(self, root: str) -> int | None:
        """llama-server's `total_slots` from `GET <root>/props` (None: not llama-server, or
        it did not answer within PROBE_TIMEOUT_SECONDS); asked once per server."""
        if root in self._probed:
            return self._probed[root]
        self._probed[root] = None
        found: int | None = None
        try:
            client = self._client or self._make_client()
            async with asyncio.timeout(PROBE_TIMEOUT_SECONDS):  # the whole answer, not a read
                response = await client.get(f"{root}/props", timeout=PROBE_TIMEOUT_SECONDS)
            if response.status_code == 200:
                found = total_slots(response.content)
        except (httpx.HTTPError, TimeoutError) as exc:
            log.info("no slot count from the server", extra={"url": root, "error": repr(exc)})
        self._probed[root] = found
        return found

    def _make_client(self) -> httpx.AsyncClient:
        self._client = httpx.AsyncClient()
        return self._client

    async def aclose(self) -> None:
        """Stop a running probe; close the probe's client (when this object made it)."""
        for task in list(self._probes):
            task.cancel()
        await asyncio.gather(*self._probes, return_exceptions=True)
        if self._own_client and self._client is not None:
            await self._client.aclose()


def total_slots(body: bytes) -> int | None:
    """`total_slots` of a llama-server `/props` answer, when it is a positive integer."""
    try:
        found = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    value = found.get("total_slots") if isinstance(found, dict) else None
    if is_int(value) and value > 0:
        return value
    return None
