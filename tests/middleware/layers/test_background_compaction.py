"""Compaction ahead of the wall: background growth after the response, waits, hysteresis."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from kernel.config import ModelEntry
from kernel.errors import ContextWindowExceeded, UpstreamError
from kernel.estimator import Estimator
from kernel.jobs import Jobs
from kernel.services import Services
from kernel.spending import Spend
from kernel.store import DiskHistoryStore, HistoryStore
from kernel.store_redis import RedisHistoryStore
from kernel.tokens import count_messages
from kernel.types import ChatRequest, ChatResponse, Completion, Message, RequestContext
from middleware.condensing.split import CONTEXT_LABEL
from middleware.layers.history_splice import HistorySplice
from middleware.layers.overflow_recovery import OverflowRecovery
from middleware.pipeline import compose
from providers.fake import json_response
from tests.conftest import make_services, sample, settings_from
from tests.middleware.layers.test_history_splice import ctx_for, next_turn
from tests.middleware.layers.test_overflow_recovery import (
    CONFIG,
    Extractor,
    Upstream,
    chat,
    conversation,
)

OUTPUT_RESERVE = 128  # CONFIG's context.max_output_tokens
SAFETY = 0.1  # context.safety_margin's default
DEADLINE = 30  # seconds: only a broken layer takes this long (no test waits it out)
DUE = 0.84
"""A share past compact_at (0.7) and within one turn of grow_at (0.85): a growth is due."""


def window_at(messages: Sequence[Message], share: float) -> int:
    """A window whose prompt budget puts `messages` at `share` of it (CONFIG's model, as
    overspill's estimator counts them)."""
    settings = settings_from(CONFIG)
    estimator = Estimator(NoCalibration())
    limit = estimator.count(settings.model_list[0], messages) / share
    return int((limit + OUTPUT_RESERVE) / (1 - SAFETY)) + 1


class NoCalibration:
    """Counting needs no calibration samples."""

    async def calibration(self, model: str) -> tuple[float, ...]:
        return ()

    async def add_calibration(self, model: str, ratio: float) -> None:
        return None


def services(store: HistoryStore, extractor: Any, window: int) -> Services:
    return make_services(settings_from(CONFIG), store, lambda name: extractor, {"local": window})


def more_turns(messages: list[dict[str, Any]], turns: int, words: int = 60) -> list[Any]:
    for turn in range(turns):
        messages = next_turn(messages, f"later {turn}: the user planned a trip " + "word " * words)
    return messages


def job_of(ctx: RequestContext) -> Any:
    """The one follow-up the layer asked the shell to run after the response."""
    ((name, job),) = ctx.after
    assert name.startswith("compaction ")
    return job


class WatchedStore(DiskHistoryStore):
    """A disk store that tells when a holder starts waiting for a conversation's flight."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.entering: list[asyncio.Event] = [asyncio.Event() for _ in range(4)]
        self.entered = 0

    def single_flight(self, tenant: str, conversation_id: str) -> AbstractAsyncContextManager[None]:
        self.entering[self.entered].set()
        self.entered += 1
        return super().single_flight(tenant, conversation_id)


@pytest.fixture
async def watched(tmp_path: Path) -> AsyncIterator[WatchedStore]:
    store = WatchedStore(tmp_path / "watched")
    yield store
    await store.aclose()


async def test_growth_runs_after_the_response_and_the_next_turn_splices_from_it(
    store: DiskHistoryStore,
) -> None:
    """Past compact_at the request goes whole at once; the growth is a follow-up job, and
    the next turn is spliced from what it stored, with no wait and no new extraction."""
    extractor, upstream = Extractor(), Upstream()
    messages = conversation(30)
    layer = HistorySplice(services(store, extractor, window_at(messages, DUE)))
    request, ctx = chat(messages), ctx_for()
    await layer.handle(request, ctx, upstream)
    assert upstream.sent == [request]
    assert ctx.notes["compaction"] == "scheduled"
    assert extractor.calls == []
    await job_of(ctx)()
    entry = await store.get("tenant-a", "conv-1")
    assert entry is not None
    assert entry.historical_end_index > 1
    calls = len(extractor.calls)
    await layer.handle(chat(next_turn(messages)), ctx := ctx_for(), upstream)
    assert ctx.notes["action"] == "spliced"
    assert "waited" not in ctx.notes
    assert ctx.notes["messages-replaced"] == str(entry.historical_end_index - 1)
    assert len(extractor.calls) == calls


async def test_no_growth_while_the_conversation_is_turns_away_from_grow_at(
    store: DiskHistoryStore,
) -> None:
    """Past compact_at but several turns from grow_at, nothing grows yet: a growth made this
    early would be spliced only turns later, with those turns piled up behind its tail."""
    messages = conversation(30)
    layer = HistorySplice(services(store, Extractor(), window_at(messages, 0.72)))
    await layer.handle(chat(messages), ctx := ctx_for(), Upstream())
    assert "compaction" not in ctx.notes
    assert ctx.after == []


async def test_a_growth_lands_near_compact_to(store: DiskHistoryStore) -> None:
    """A grown extraction leaves the spliced request at or under compact_to of the budget."""
    extractor = Extractor()
    messages = conversation(30)
    window = window_at(messages, DUE)
    layer = HistorySplice(services(store, extractor, window))
    await layer.handle(chat(messages), ctx := ctx_for(), Upstream())
    await job_of(ctx)()
    await layer.handle(chat(next_turn(messages)), ctx := ctx_for(), Upstream())
    limit = int(window * (1 - SAFETY)) - OUTPUT_RESERVE
    assert int(ctx.notes["tokens-after"]) <= 0.5 * limit


async def test_a_turn_that_fits_does_not_wait_for_a_running_growth(
    store: DiskHistoryStore,
) -> None:
    """While a growth runs, a turn under grow_at is sent at once (whole, as before), and
    the follow-up it schedules finds the conversation busy instead of extracting twice."""
    gate = asyncio.Event()
    extractor = Extractor(gate=gate)
    messages = conversation(30)
    layer = HistorySplice(services(store, extractor, window_at(messages, DUE)))
    await layer.handle(chat(messages), ctx := ctx_for(), Upstream())
    running = asyncio.create_task(job_of(ctx)())
    await extractor.started.wait()
    upstream = Upstream()
    later = chat(next_turn(messages))
    await layer.handle(later, ctx := ctx_for(), upstream)
    assert upstream.sent == [later]
    assert "waited" not in ctx.notes
    busy = sample("overspill_compaction_jobs_total", model="local", result="busy")
    await job_of(ctx)()
    assert sample("overspill_compaction_jobs_total", model="local", result="busy") == busy + 1
    gate.set()
    await running
    assert len(extractor.calls) == 1


async def test_a_turn_that_cannot_fit_waits_for_the_running_growth(
    watched: WatchedStore,
) -> None:
    """Past grow_at while a growth runs, the turn waits for it (not a second extraction),
    is counted, and is sent spliced from the entry the growth stored."""
    gate = asyncio.Event()
    extractor = Extractor(gate=gate)
    messages = conversation(30)
    layer = HistorySplice(services(watched, extractor, window_at(messages, DUE)))
    await layer.handle(chat(messages), ctx := ctx_for(), Upstream())
    running = asyncio.create_task(job_of(ctx)())
    await extractor.started.wait()
    waited = sample("overspill_compaction_waited_turns_total", model="local", why="job")
    upstream = Upstream()
    turn = asyncio.create_task(
        layer.handle(chat(more_turns(messages, 10)), ctx := ctx_for(), upstream)
    )
    async with asyncio.timeout(DEADLINE):  # the turn queues behind the growth's flight
        await watched.entering[1].wait()
    assert upstream.sent == []
    gate.set()
    await running
    await turn
    assert ctx.notes["waited"] == "job"
    assert ctx.notes["action"] == "spliced"
    assert len(extractor.calls) == 1
    assert sample("overspill_compaction_waited_turns_total", model="local", why="job") == (
        waited + 1
    )
    (sent,) = upstream.sent
    assert str(sent.messages[1]["content"]).startswith(CONTEXT_LABEL)


class RefusingUpstream:
    """A scripted model server: refuses (and counts) a prompt larger than its window."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.refused = 0
        self.sent: list[ChatRequest] = []

    async def __call__(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        self.sent.append(request)
        tokens = count_messages(request.messages)
        if tokens + OUTPUT_RESERVE > self.window:
            self.refused += 1
            raise ContextWindowExceeded(
                f"requested {tokens + OUTPUT_RESERVE} tokens, the window is {self.window}",
                requested=tokens + OUTPUT_RESERVE,
                limit=self.window,
            )
        return json_response("ok", prompt_tokens=tokens)


async def test_a_known_window_never_costs_a_failed_call(store: DiskHistoryStore) -> None:
    """Over a long conversation (tool calls among the turns) with a known window, no request
    is refused, no turn waits, and growths come every several turns, not every turn."""
    extractor = Extractor()
    shared = services(store, extractor, 2048)
    upstream = RefusingUpstream(2048)
    pipeline = compose([HistorySplice(shared), OverflowRecovery(shared)], upstream)
    messages: list[Any] = [{"role": "system", "content": "Be helpful."}]
    waited = 0
    for turn in range(80):
        messages.append({"role": "user", "content": f"turn {turn}: " + "word " * 50})
        if turn % 4 == 3:
            call = {"id": f"c{turn}", "type": "function",
                    "function": {"name": "lookup", "arguments": "{}"}}  # fmt: skip
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            messages.append({"role": "tool", "tool_call_id": f"c{turn}", "content": "ok " * 40})
        await pipeline(chat(messages), ctx := ctx_for())
        waited += "waited" in ctx.notes
        for _, job in ctx.after:
            await job()
        messages.append({"role": "assistant", "content": f"reply {turn} " + "word " * 30})
    assert upstream.refused == 0
    assert waited == 0
    assert 2 <= len(extractor.calls) <= 80 / 4


async def test_unknown_window_keeps_fail_first(store: DiskHistoryStore) -> None:
    """With no window known nothing is compacted before sending: overflow_recovery's
    first strike (the upstream's refusal states the limit) stays the way in."""
    extractor = Extractor()
    shared = make_services(settings_from(CONFIG), store, lambda name: extractor, {})
    upstream = Upstream(fits=20)
    pipeline = compose([HistorySplice(shared), OverflowRecovery(shared)], upstream)
    messages = conversation(30)
    await pipeline(chat(messages), ctx := ctx_for())
    assert upstream.sent[0].messages == tuple(messages)  # sent whole, refused once
    assert ctx.notes["attempts"] == "2"
    assert "waited" not in ctx.notes


async def test_the_spliced_prefix_is_the_same_bytes_between_growths(
    store: DiskHistoryStore,
) -> None:
    """Between growths the system messages + the extraction message are byte-identical from
    turn to turn, so the upstream's prefix cache keeps serving them."""
    extractor = Extractor()
    messages = conversation(30)
    layer = HistorySplice(services(store, extractor, window_at(messages, DUE)))
    await layer.handle(chat(messages), ctx := ctx_for(), Upstream())
    await job_of(ctx)()
    upstream = Upstream()
    prefixes = []
    for turn in range(4):
        messages = next_turn(messages, f"short {turn}")
        await layer.handle(chat(messages), ctx := ctx_for(), upstream)
        assert ctx.notes["action"] == "spliced"
        body = upstream.sent[-1].render("local")
        stand_in = orjson.dumps(upstream.sent[-1].messages[1])
        prefixes.append(body[: body.index(stand_in) + len(stand_in)])
    assert len(set(prefixes)) == 1
    assert len(extractor.calls) == 1


class Primer:
    """Records what a growth asks to be warmed."""

    def __init__(self) -> None:
        self.sent: list[ChatRequest] = []

    async def __call__(
        self, request: ChatRequest, entry: ModelEntry, spend: Spend | None = None
    ) -> str:
        self.sent.append(request)
        return "warmed"


def warming(store: HistoryStore, extractor: Any, window: int, primer: Primer) -> HistorySplice:
    return HistorySplice(replace(services(store, extractor, window), warm=primer))


async def test_a_growth_warms_the_prefix_the_next_turn_sends(store: DiskHistoryStore) -> None:
    """After a background growth the conversation is sent once as its next turn will start:
    the next turn's body begins with exactly those messages' bytes."""
    primer = Primer()
    messages = conversation(30)
    layer = warming(store, Extractor(), window_at(messages, DUE), primer)
    await layer.handle(chat(messages), ctx := ctx_for(), Upstream())
    assert primer.sent == []
    await job_of(ctx)()
    ((warmed,),) = [primer.sent]
    assert warmed.messages[1]["content"].startswith(CONTEXT_LABEL)
    assert warmed.spliced_from == tuple(messages)
    upstream = Upstream()
    await layer.handle(chat(next_turn(messages, "and one more thing")), ctx_for(), upstream)
    sent = upstream.sent[-1].messages
    assert len(sent) == len(warmed.messages) + 2
    assert orjson.dumps(sent[: len(warmed.messages)]) == orjson.dumps(warmed.messages)


async def test_a_growth_that_changes_nothing_warms_nothing(store: DiskHistoryStore) -> None:
    """A growth that stores nothing new (unneeded, or the strategies could not condense)
    leaves the upstream's cache alone."""
    primer = Primer()
    messages = conversation(30)
    window = window_at(messages, DUE)
    layer = warming(store, Extractor(), window, primer)
    await layer.handle(chat(messages), ctx := ctx_for(), Upstream())
    await job_of(ctx)()
    again = layer.job(chat(messages), ctx_for(), ctx.model)  # type: ignore[arg-type]
    await again()

    async def failing(messages: Sequence[Message], *, max_tokens: int) -> Completion:
        raise UpstreamError("the extraction model is down", provider="openai")

    broken = warming(store, failing, window, primer)
    await broken.job(chat(more_turns(messages, 12)), ctx_for(), ctx.model)()  # type: ignore[arg-type]
    assert len(primer.sent) == 1


async def test_a_failed_growth_leaves_the_previous_entry(store: DiskHistoryStore) -> None:
    """A growth whose extraction model fails stores nothing (the ladder's cut is for one
    request only): the previous entry stays, whole."""
    messages = conversation(30)
    window = window_at(messages, DUE)
    layer = HistorySplice(services(store, Extractor(), window))
    await layer.handle(chat(messages), ctx := ctx_for(), Upstream())
    await job_of(ctx)()
    before = await store.get("tenant-a", "conv-1")

    async def failing(messages: Sequence[Message], *, max_tokens: int) -> Completion:
        raise UpstreamError("the extraction model is down", provider="openai")

    broken = HistorySplice(services(store, failing, window))
    cut = sample("overspill_compaction_jobs_total", model="local", result="cut")
    growth = broken.job(chat(more_turns(messages, 12)), ctx_for(), ctx.model)  # type: ignore[arg-type]
    await growth()
    assert await store.get("tenant-a", "conv-1") == before
    assert sample("overspill_compaction_jobs_total", model="local", result="cut") == cut + 1


async def test_a_cancelled_growth_leaves_the_previous_entry_and_no_lock(
    store: DiskHistoryStore,
) -> None:
    """A growth cancelled mid-extraction (a crash, a shutdown) writes nothing and frees
    the conversation's flight for the next one."""
    messages = conversation(30)
    window = window_at(messages, DUE)
    await HistorySplice(services(store, Extractor(), window)).handle(
        chat(messages), ctx := ctx_for(), Upstream()
    )
    await job_of(ctx)()
    before = await store.get("tenant-a", "conv-1")
    gate = asyncio.Event()
    extractor = Extractor(gate=gate)
    layer = HistorySplice(services(store, extractor, window))
    cancelled = sample("overspill_compaction_jobs_total", model="local", result="cancelled")
    growth = layer.job(chat(more_turns(messages, 12)), ctx_for(), ctx.model)  # type: ignore[arg-type]
    task = asyncio.create_task(growth())
    await extractor.started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await store.get("tenant-a", "conv-1") == before
    assert not await store.flight_busy("tenant-a", "conv-1")
    assert sample("overspill_compaction_jobs_total", model="local", result="cancelled") == (
        cancelled + 1
    )


async def test_closing_the_system_cancels_a_growth_cleanly(store: DiskHistoryStore) -> None:
    """Jobs started after a response are drained at close; one past the grace period is
    cancelled and leaves the store as it was, and none starts once closing."""
    gate = asyncio.Event()
    extractor = Extractor(gate=gate)
    messages = conversation(30)
    layer = HistorySplice(services(store, extractor, window_at(messages, DUE)))
    await layer.handle(chat(messages), ctx := ctx_for(), Upstream())
    jobs = Jobs()
    assert jobs.start_after(ctx) == 1
    assert ctx.after == []
    await extractor.started.wait()
    assert await jobs.drain(grace=0) == 1
    assert await store.get("tenant-a", "conv-1") is None
    await layer.handle(chat(next_turn(messages)), ctx := ctx_for(), Upstream())
    assert jobs.start_after(ctx) == 0


@asynccontextmanager
async def replicas(redis_url: str) -> AsyncIterator[tuple[RedisHistoryStore, RedisHistoryStore]]:
    prefix = f"test-{secrets.token_hex(4)}:"
    first = RedisHistoryStore(redis_url, key_prefix=prefix)
    second = RedisHistoryStore(redis_url, key_prefix=prefix)
    try:
        yield first, second
    finally:
        await first.aclose()
        await second.aclose()


async def test_two_replicas_on_one_redis_grow_once(redis_url: str) -> None:
    """The same turn answered by two replicas schedules a growth on each; it runs once
    (the other finds the Redis lock held), and either replica then splices from it."""
    gate = asyncio.Event()
    extractor = Extractor(gate=gate)
    messages = conversation(30)
    window = window_at(messages, DUE)
    async with replicas(redis_url) as (first, second):
        one = HistorySplice(services(first, extractor, window))
        two = HistorySplice(services(second, extractor, window))
        await one.handle(chat(messages), ctx_one := ctx_for(), Upstream())
        await two.handle(chat(messages), ctx_two := ctx_for(), Upstream())
        running = asyncio.create_task(job_of(ctx_one)())
        await extractor.started.wait()
        busy = sample("overspill_compaction_jobs_total", model="local", result="busy")
        await job_of(ctx_two)()
        assert sample("overspill_compaction_jobs_total", model="local", result="busy") == busy + 1
        gate.set()
        await running
        assert len(extractor.calls) == 1
        await two.handle(chat(next_turn(messages)), ctx := ctx_for(), Upstream())
        assert ctx.notes["action"] == "spliced"
        assert len(extractor.calls) == 1


def test_hysteresis_shares_are_checked_at_startup() -> None:
    """compact_to < compact_at <= grow_at, or the config is refused naming the YAML path."""
    from kernel.config_loading import ConfigError

    bad = CONFIG.replace(
        "max_output_tokens: 128}", "max_output_tokens: 128, compact_to: 0.8, compact_at: 0.7}"
    )
    with pytest.raises(ConfigError, match=r"model_list\[0\]\.context.*compact_to < compact_at"):
        settings_from(bad)
