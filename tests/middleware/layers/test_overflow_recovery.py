"""The overflow_recovery layer with a scripted pipeline and a scripted extractor."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import orjson
import pytest

from kernel.errors import ContextWindowExceeded, UpstreamError
from kernel.store import DiskHistoryStore, StoreError
from kernel.tokens import count_messages
from kernel.types import ChatRequest, ChatResponse, Complete, Completion, Message, RequestContext
from middleware.condensing.split import CONTEXT_LABEL
from middleware.layers.overflow_recovery import OverflowRecovery
from providers.fake import json_response
from tests.conftest import make_services, settings_from

CONFIG = """
model_list:
  - model_name: local
    litellm_params: {model: openai/smollm2, api_base: "http://upstream.test/v1"}
    context: {window: 2048, max_output_tokens: 128}
"""
SUMMARY = "Notes:\n- The user planned a trip."


class Extractor:
    """A scripted extraction model: records prompts, answers with a short summary."""

    def __init__(self, text: str = SUMMARY, gate: asyncio.Event | None = None) -> None:
        self.text = text
        self.gate = gate
        self.calls: list[Sequence[Message]] = []
        self.started = asyncio.Event()

    async def __call__(self, messages: Sequence[Message], *, max_tokens: int) -> Completion:
        self.calls.append(messages)
        self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        return Completion(self.text, prompt_tokens=100, completion_tokens=10, finish_reason="stop")


class Upstream:
    """The rest of the pipeline: overflows while the prompt is longer than `fits` messages
    (or, with `fail_first`, on that many first calls)."""

    def __init__(
        self, fits: int = 1000, overflow: ContextWindowExceeded | None = None, fail_first: int = 0
    ) -> None:
        self.fits = fits
        self.fail_first = fail_first
        self.overflow = overflow or ContextWindowExceeded(
            "maximum context length is 2048 tokens", limit=2048
        )
        self.sent: list[ChatRequest] = []

    async def __call__(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        self.sent.append(request)
        if len(request.messages) > self.fits or len(self.sent) <= self.fail_first:
            raise self.overflow
        return json_response("ok", prompt_tokens=count_messages(request.messages))


def conversation(turns: int, words: int = 60) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be helpful."}]
    for turn in range(turns):
        messages.append(
            {"role": "user", "content": f"turn {turn}: the user planned a trip " + "word " * words}
        )
        messages.append({"role": "assistant", "content": f"reply {turn} " + "word " * words})
    messages.append({"role": "user", "content": "What did we plan?"})
    return messages


def chat(messages: list[dict[str, Any]]) -> ChatRequest:
    body = {"model": "local", "messages": messages}
    return ChatRequest("local", tuple(messages), False, body, raw=orjson.dumps(body))


def layer_for(store: Any, extractor: Complete, config: str = CONFIG) -> OverflowRecovery:
    windows = {"local": 2048, "big": 32768}
    return OverflowRecovery(
        make_services(settings_from(config), store, lambda name: extractor, windows)
    )


def ctx_for(conversation_id: str = "conv-1", config: str = CONFIG) -> RequestContext:
    ctx = RequestContext("rid", "tenant-a", conversation_hint=conversation_id)
    ctx.model = settings_from(config).model_list[0]
    return ctx


async def test_no_overflow_passes_through_untouched(store: DiskHistoryStore) -> None:
    """A request that fits is sent once, as it came, with no notes."""
    upstream, extractor = Upstream(fits=1000), Extractor()
    ctx = ctx_for()
    request = chat(conversation(3))
    await layer_for(store, extractor).handle(request, ctx, upstream)
    assert upstream.sent == [request]
    assert ctx.notes == {}
    assert extractor.calls == []


async def test_first_overflow_extracts_caches_and_retries_once(store: DiskHistoryStore) -> None:
    """On overflow the history is condensed, cached, and the request retried once."""
    upstream, extractor = Upstream(fits=20), Extractor()
    ctx = ctx_for()
    messages = conversation(30)
    await layer_for(store, extractor).handle(chat(messages), ctx, upstream)
    assert len(upstream.sent) == 2
    retry = upstream.sent[1].messages
    assert retry[0] == messages[0]
    assert str(retry[1]["content"]).startswith(CONTEXT_LABEL)
    assert SUMMARY.splitlines()[1] in str(retry[1]["content"])
    assert retry[-1] == messages[-1]
    assert list(retry[2:]) == messages[len(messages) - len(retry) + 2 :]
    assert ctx.notes["action"] == "extracted"
    assert ctx.notes["attempts"] == "2"
    assert int(ctx.notes["tokens-after"]) < int(ctx.notes["tokens-before"])
    assert int(ctx.notes["extraction-calls"]) == len(extractor.calls) >= 1
    entry = await store.get("tenant-a", "conv-1")
    assert entry is not None
    assert entry.model_id == "local"
    assert entry.historical_end_index == len(messages) - len(retry) + 2


async def test_second_overflow_fails_loudly(
    store: DiskHistoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """When the condensed retry overflows too, the client gets 400 saying what was tried."""
    upstream, extractor = Upstream(fits=0), Extractor()
    with pytest.raises(ContextWindowExceeded) as caught:
        await layer_for(store, extractor).handle(chat(conversation(30)), ctx_for(), upstream)
    assert len(upstream.sent) == 2
    assert (
        "still exceeds the context window after overspill condensed its history once"
        in caught.value.message
    )
    assert any(record.levelname == "CRITICAL" for record in caplog.records)


async def test_next_turn_reuses_the_cached_extraction(store: DiskHistoryStore) -> None:
    """A later overflow of the same conversation builds on the cache instead of starting over."""
    upstream, extractor = Upstream(fits=25), Extractor()
    layer = layer_for(store, extractor)
    messages = conversation(30)
    await layer.handle(chat(messages), ctx_for(), upstream)
    first_calls = len(extractor.calls)
    longer = [
        *messages,
        {"role": "assistant", "content": "We planned a trip."},
        {"role": "user", "content": "When?"},
    ]
    ctx = ctx_for()
    await layer.handle(chat(longer), ctx, upstream)
    assert ctx.notes["action"] in ("reused", "extracted-incremental")
    if ctx.notes["action"] == "extracted-incremental":
        prompt = orjson.dumps(list(extractor.calls[first_calls])).decode()
        assert "planned a trip" in prompt


async def test_edited_history_misses_the_cache(store: DiskHistoryStore) -> None:
    """A branched or edited history never gets the cached summary of another history."""
    upstream, extractor = Upstream(fits=20), Extractor()
    layer = layer_for(store, extractor)
    messages = conversation(30)
    await layer.handle(chat(messages), ctx_for(), upstream)
    edited = [messages[0], {"role": "user", "content": "something else entirely"}, *messages[2:]]
    ctx = ctx_for()
    await layer.handle(chat(edited), ctx, upstream)
    assert ctx.notes["action"] == "extracted"


async def test_bad_extraction_falls_back_to_a_visible_cut_that_is_cached(
    store: DiskHistoryStore,
) -> None:
    """A refusing extractor falls back (nothing to mask here) to a middle cut with a visible
    marker beside the quoted facts; it is cached under its strategy, never the refusal."""
    upstream, extractor = Upstream(fits=20), Extractor(text="I'm sorry, I cannot help with that.")
    ctx = ctx_for()
    await layer_for(store, extractor).handle(chat(conversation(30)), ctx, upstream)
    assert ctx.notes["action"] == "truncated"
    assert ctx.notes["strategy"] == "middle_cut"
    stand_in = str(upstream.sent[1].messages[1]["content"])
    assert "[… overspill removed" in stand_in or "tokens omitted …]" in stand_in
    cached = await store.get("tenant-a", "conv-1")
    assert cached is not None
    assert cached.strategy == "middle_cut"
    assert "sorry" not in cached.extraction


LADDER_CONFIG = """
model_list:
  - model_name: local
    litellm_params: {model: openai/smollm2, api_base: "http://upstream.test/v1"}
    context: {window: 2048, max_output_tokens: 128, extraction_model: big}
  - model_name: big
    litellm_params: {model: openai/big, api_base: "http://upstream.test/v1"}
"""


async def test_one_huge_last_message_takes_the_ladder(store: DiskHistoryStore) -> None:
    """A last user message larger than the window alone is condensed by the cheaper model."""
    upstream, extractor = (
        Upstream(fail_first=1),
        Extractor(text="The user pasted a long log about disk errors."),
    )
    ctx = ctx_for(config=LADDER_CONFIG)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "disk error at sector 7. " * 500}]
    layer = layer_for(store, extractor, LADDER_CONFIG)
    response = await layer.handle(chat(messages), ctx, upstream)
    assert response.json()["choices"][0]["message"]["content"] == "ok"
    assert ctx.notes["oversized"] == "0:cheapest"
    assert (
        upstream.sent[1].messages[0]["content"] == "The user pasted a long log about disk errors."
    )


async def test_a_message_no_model_can_read_is_cut_in_the_middle(store: DiskHistoryStore) -> None:
    """When no rung's window can hold the message, its middle is cut with a visible marker."""
    upstream, extractor = Upstream(fail_first=1), Extractor()
    ctx = ctx_for()
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "disk error at sector 7. " * 2000}
    ]
    await layer_for(store, extractor).handle(chat(messages), ctx, upstream)
    assert ctx.notes["oversized"] == "0:truncated"
    assert "tokens omitted" in str(upstream.sent[1].messages[0]["content"])


async def test_concurrent_overflows_run_one_extraction(store: DiskHistoryStore) -> None:
    """Two overflows of one conversation at once share a single extraction."""
    gate = asyncio.Event()
    upstream, extractor = Upstream(fits=20), Extractor(gate=gate)
    layer = layer_for(store, extractor)
    messages = conversation(30)
    first_ctx, second_ctx = ctx_for(), ctx_for()
    first = asyncio.ensure_future(layer.handle(chat(messages), first_ctx, upstream))
    second = asyncio.ensure_future(layer.handle(chat(messages), second_ctx, upstream))
    await extractor.started.wait()
    gate.set()
    await asyncio.gather(first, second)
    assert first_ctx.notes["action"] == "extracted"
    assert second_ctx.notes["action"] == "reused"
    assert len(extractor.calls) == int(first_ctx.notes["extraction-calls"])


class BrokenStore(DiskHistoryStore):
    """A store whose disk has gone away."""

    async def get(self, tenant: str, conversation_id: str) -> None:
        raise StoreError("disk gone")

    async def put(self, entry: Any) -> None:
        raise StoreError("disk gone")


async def test_a_failing_store_does_not_fail_the_request(tmp_path: Any) -> None:
    """Store errors are logged; the request is still recovered, just not cached."""
    store = BrokenStore(tmp_path / "s")
    upstream, extractor = Upstream(fits=20), Extractor()
    ctx = ctx_for()
    response = await layer_for(store, extractor).handle(chat(conversation(30)), ctx, upstream)
    assert response.json()["choices"][0]["message"]["content"] == "ok"
    assert ctx.notes["action"] == "extracted"
    await store.aclose()


async def test_a_long_message_that_fits_is_left_alone(store: DiskHistoryStore) -> None:
    """No character rule: a 60,000-character message within its token share is not touched,
    and no header claims it was."""
    upstream, extractor = Upstream(fail_first=1), Extractor()
    big = "-" * 60_000  # about 940 tokens: many characters, within the share
    messages: list[dict[str, Any]] = [*conversation(30), {"role": "user", "content": big}]
    ctx = ctx_for()
    windows = {"local": 32768}
    layer = OverflowRecovery(
        make_services(settings_from(CONFIG), store, lambda n: extractor, windows)
    )
    await layer.handle(chat(messages), ctx, upstream)
    assert "oversized" not in ctx.notes
    assert upstream.sent[1].messages[-1]["content"] == big


class FailingOnce(Extractor):
    """An extraction model whose first call fails as a 503 would."""

    async def __call__(self, messages: Sequence[Message], *, max_tokens: int) -> Completion:
        if not self.calls:
            self.calls.append(messages)
            raise UpstreamError("upstream failed (503)", upstream_status=503)
        return await super().__call__(messages, max_tokens=max_tokens)


async def test_a_failed_extraction_call_is_retried_once(store: DiskHistoryStore) -> None:
    """A 5xx from the extraction model is tried once more before the recovery moves on."""
    upstream, extractor = Upstream(fits=20), FailingOnce()
    ctx = ctx_for()
    await layer_for(store, extractor).handle(chat(conversation(30)), ctx, upstream)
    assert ctx.notes["action"] == "extracted"
    assert len(extractor.calls) >= 2


BOUNDED_CONFIG = """
model_list:
  - model_name: local
    litellm_params: {model: openai/smollm2, api_base: "http://upstream.test/v1"}
    context: {window: 2048, max_output_tokens: 128, max_extraction_input_tokens: 600}
"""


async def test_history_past_the_extraction_bound_keeps_only_its_facts(
    store: DiskHistoryStore,
) -> None:
    """An extraction reads at most max_extraction_input_tokens; older turns are facts only,
    and the header says how many."""
    upstream, extractor = Upstream(fits=20), Extractor()
    messages = conversation(30)
    messages[1] = {"role": "user", "content": "The vault code is ZX-4471."}
    ctx = ctx_for(config=BOUNDED_CONFIG)
    await layer_for(store, extractor, BOUNDED_CONFIG).handle(chat(messages), ctx, upstream)
    bounded = int(ctx.notes["extraction-bounded"])
    assert bounded > 0
    sent = orjson.dumps([list(call) for call in extractor.calls]).decode()
    assert "ZX-4471" not in sent
    assert "ZX-4471" in str(upstream.sent[1].messages[1]["content"])


async def test_truncation_allowed_drops_the_oldest_turns_after_a_second_overflow(
    store: DiskHistoryStore,
) -> None:
    """When the client allows truncation, a retry that still overflows loses its oldest turns
    (system messages, the stand-in and the newest turn stay) and is sent once more."""
    upstream, extractor = Upstream(fail_first=2), Extractor()
    ctx = ctx_for()
    ctx.may_truncate = True
    response = await layer_for(store, extractor).handle(chat(conversation(30)), ctx, upstream)
    assert response.json()["choices"][0]["message"]["content"] == "ok"
    assert len(upstream.sent) == 3
    last = upstream.sent[-1].messages
    assert len(last) < len(upstream.sent[1].messages)
    assert last[-1]["content"] == "What did we plan?"
    assert any(CONTEXT_LABEL in str(m.get("content")) for m in last if m["role"] == "system")
    assert int(ctx.notes["truncated"]) > 0


async def test_without_truncation_a_second_overflow_still_fails(store: DiskHistoryStore) -> None:
    """Without the client's permission the second overflow is final, as before."""
    upstream, extractor = Upstream(fail_first=2), Extractor()
    with pytest.raises(ContextWindowExceeded):
        await layer_for(store, extractor).handle(chat(conversation(30)), ctx_for(), upstream)
    assert len(upstream.sent) == 2
