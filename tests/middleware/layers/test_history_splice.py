"""The history_splice layer: proactive splice from a valid cache entry, misses, growth, opt-out."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
import pytest

from kernel.conversation import chain, chain_matches
from kernel.records import StoredFact, stored_facts
from kernel.services import Services
from kernel.store import DiskHistoryStore, HistoryEntry
from kernel.types import ChatRequest, ChatResponse, RequestContext
from middleware.condensing.extraction import PROMPT_VERSION
from middleware.condensing.relevance import END, LABEL
from middleware.condensing.split import CONTEXT_LABEL, context_message
from middleware.layers.history_splice import HistorySplice
from middleware.layers.overflow_recovery import OverflowRecovery
from middleware.pipeline import compose
from providers.fake import completion
from tests.conftest import make_services, settings_from
from tests.middleware.layers.test_overflow_recovery import (
    CONFIG,
    SUMMARY,
    Extractor,
    Upstream,
    chat,
    conversation,
)


def services(store: DiskHistoryStore, extractor: Extractor, window: int = 2048) -> Services:
    return make_services(settings_from(CONFIG), store, lambda name: extractor, {"local": window})


def ctx_for(config: str = CONFIG, skip_history: bool = False) -> RequestContext:
    model = settings_from(config).model_list[0]
    return RequestContext(
        "rid", "tenant-a", model=model, conversation_hint="conv-1", skip_history=skip_history
    )


async def seed(
    store: DiskHistoryStore, extractor: Extractor, messages: list[dict[str, Any]]
) -> None:
    """Make the conversation overflow once through overflow_recovery, which caches it."""
    await OverflowRecovery(services(store, extractor)).handle(
        chat(messages), ctx_for(), Upstream(fits=20)
    )


def next_turn(messages: list[dict[str, Any]], text: str = "And then?") -> list[dict[str, Any]]:
    return [
        *messages,
        {"role": "assistant", "content": "the user planned a trip"},
        {"role": "user", "content": text},
    ]


async def test_no_cache_entry_passes_through(store: DiskHistoryStore) -> None:
    """A conversation with no extraction that fits its window is sent as it came."""
    upstream = Upstream()
    request = chat(conversation(30))
    ctx = ctx_for()
    roomy = services(store, Extractor(), window=32768)
    await HistorySplice(roomy).handle(request, ctx, upstream)
    assert upstream.sent == [request]
    assert "action" not in ctx.notes


async def test_a_cached_conversation_is_spliced_before_sending(store: DiskHistoryStore) -> None:
    """The next turn goes out as system + extraction + the turns after it: no failed call."""
    extractor = Extractor()
    messages = conversation(30)
    await seed(store, extractor, messages)
    cached = await store.get("tenant-a", "conv-1")
    assert cached is not None
    longer = next_turn(messages)
    upstream, ctx = Upstream(fits=40), ctx_for()
    roomy = services(store, extractor, window=8192)  # far from the wall: nothing to grow
    await HistorySplice(roomy).handle(chat(longer), ctx, upstream)
    (sent,) = upstream.sent
    assert sent.messages[0] == longer[0]
    assert str(sent.messages[1]["content"]).startswith(CONTEXT_LABEL)
    assert list(sent.messages[2:]) == longer[cached.historical_end_index :]
    assert ctx.notes["action"] == "spliced"
    assert ctx.notes["messages-replaced"] == str(cached.historical_end_index - 1)
    assert int(ctx.notes["tokens-after"]) < int(ctx.notes["tokens-before"])


async def test_a_message_masked_after_the_extraction_still_matches_it(
    store: DiskHistoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A message the extraction stands for, sent later as another layer's placeholder beside
    the client's own (`RequestContext.unmasked`), is not an edit: the extraction is spliced."""
    extractor = Extractor()
    messages = conversation(30)
    await seed(store, extractor, messages)
    longer = next_turn(messages)
    masked = [*longer[:3], {**longer[3], "content": "[masked: call it back]"}, *longer[4:]]
    upstream, ctx = Upstream(fits=40), ctx_for()
    ctx.unmasked = tuple(longer)
    roomy = services(store, extractor, window=8192)  # far from the wall: nothing to grow
    with caplog.at_level(logging.INFO, logger="overspill.history_splice"):
        await HistorySplice(roomy).handle(chat(masked), ctx, upstream)
    assert [r for r in caplog.records if r.getMessage() == "history cache miss"] == []
    assert ctx.notes["action"] == "spliced"


async def test_an_extraction_reads_the_tool_results_masking_replaced(
    store: DiskHistoryStore,
) -> None:
    """A tool result another layer sent as a placeholder is condensed from the client's own
    message (`RequestContext.unmasked`): the setting it returned is in the extraction."""
    call = {"id": "call_1", "type": "function",
            "function": {"name": "read_file", "arguments": '{"path": "config/app.toml"}'}}  # fmt: skip
    result = "[server]\nport = 8443\ncache_ttl_seconds = 45\nworkers = 6"
    chatter = [
        {"role": role, "content": f"{role} chatter " + "word " * 60}
        for _ in range(30)
        for role in ("user", "assistant")
    ]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Be helpful."},
        {"role": "user", "content": "Read the app's config, please."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": result},
        *chatter,
        {"role": "user", "content": "What is the cache TTL?"},
    ]
    masked = [*messages[:3], {**messages[3], "content": "[masked: call it back]"}, *messages[4:]]
    ctx = ctx_for()
    ctx.unmasked = tuple(messages)
    await OverflowRecovery(services(store, Extractor())).handle(
        chat(masked), ctx, Upstream(fits=20)
    )
    stored = await store.get("tenant-a", "conv-1")
    assert stored is not None
    assert "cache_ttl_seconds = 45" in stored.extraction
    assert "[masked: call it back]" not in stored.extraction


async def test_clients_can_opt_out(store: DiskHistoryStore) -> None:
    """A request whose client asked to skip history (resolved at the edge) goes whole."""
    extractor = Extractor()
    messages = conversation(30)
    await seed(store, extractor, messages)
    request = chat(next_turn(messages))
    upstream = Upstream()
    layer = HistorySplice(services(store, extractor))
    await layer.handle(request, ctx_for(skip_history=True), upstream)
    assert upstream.sent[0].messages == request.messages


async def test_short_conversations_are_not_spliced(store: DiskHistoryStore) -> None:
    """Below the minimum message count (20 by default) the layer does nothing."""
    upstream = Upstream()
    request = chat(conversation(5))
    await HistorySplice(services(store, Extractor())).handle(request, ctx_for(), upstream)
    assert upstream.sent == [request]


async def test_misses_are_logged_with_their_reason(
    store: DiskHistoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """An edited prefix or another model is a miss: full history sent, reason logged."""
    extractor = Extractor()
    messages = conversation(30)
    await seed(store, extractor, messages)
    edited = next_turn(
        [messages[0], {"role": "user", "content": "a different start"}, *messages[2:]]
    )
    upstream = Upstream()
    roomy = services(store, extractor, window=32768)  # the whole history fits: nothing to grow
    with caplog.at_level(logging.INFO, logger="overspill.history_splice"):
        await HistorySplice(roomy).handle(chat(edited), ctx_for(), upstream)
    assert upstream.sent[0].messages == tuple(edited)
    (miss,) = [r for r in caplog.records if r.getMessage() == "history cache miss"]
    assert miss.__dict__["reason"] == "the summarised messages were edited or the history branched"

    other = chat(next_turn(messages))
    other = ChatRequest("other", other.messages, False, {**other.body, "model": "other"})
    with caplog.at_level(logging.INFO, logger="overspill.history_splice"):
        await HistorySplice(services(store, extractor)).handle(other, ctx_for(), Upstream())
    assert caplog.records[-1].__dict__["reason"] == "model changed (local → other)"


async def test_extraction_grows_ahead_of_the_wall(store: DiskHistoryStore) -> None:
    """When the spliced request is still near the budget, the extraction grows before sending."""
    extractor = Extractor()
    messages = conversation(30)
    await seed(store, extractor, messages)
    before = len(extractor.calls)
    much_longer = [*messages]
    for turn in range(12):
        much_longer = next_turn(
            much_longer, f"turn {turn}: the user planned a trip " + "word " * 60
        )
    upstream, ctx = Upstream(fits=40), ctx_for()
    await HistorySplice(services(store, extractor)).handle(chat(much_longer), ctx, upstream)
    assert ctx.notes["action"] == "spliced+extracted"
    assert len(extractor.calls) > before
    grown = await store.get("tenant-a", "conv-1")
    assert grown is not None
    assert grown.message_count == len(much_longer)
    assert len(upstream.sent) == 1


async def test_upstream_usage_calibrates_estimates(store: DiskHistoryStore) -> None:
    """The prompt_tokens the upstream reports for a spliced request tune the model's ratio."""
    extractor = Extractor()
    messages = conversation(30)
    await seed(store, extractor, messages)
    shared = services(store, extractor)

    async def upstream(request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        return ChatResponse(body=orjson.dumps(completion("ok", prompt_tokens=5000)))

    await HistorySplice(shared).handle(chat(next_turn(messages)), ctx_for(), upstream)
    assert await shared.estimator.scale(shared.entry("local")) > 1.0


async def test_with_recovery_behind_it_no_request_fails_after_the_first(
    store: DiskHistoryStore,
) -> None:
    """history_splice + overflow_recovery, window known: not even the first turn fails."""
    extractor = Extractor()
    shared = services(store, extractor)
    upstream = Upstream(fits=30)
    pipeline = compose([HistorySplice(shared), OverflowRecovery(shared)], upstream)
    messages = conversation(30)
    await pipeline(chat(messages), ctx := ctx_for())
    assert len(upstream.sent) == 1
    assert ctx.notes["waited"] == "extraction"
    for turn in range(3):
        messages = next_turn(messages, f"question {turn}")
        await pipeline(chat(messages), ctx := ctx_for())
        assert ctx.notes["action"].startswith("spliced")
    assert len(upstream.sent) == 4


async def test_a_spliced_request_that_overflows_is_recovered_from_the_clients_history(
    store: DiskHistoryStore,
) -> None:
    """When a spliced request still overflows, the cache is rebuilt from the client's own
    messages, so the next turn splices again instead of missing."""
    extractor = Extractor()
    shared = services(store, extractor)
    upstream = Upstream(fits=30)
    pipeline = compose([HistorySplice(shared), OverflowRecovery(shared)], upstream)
    messages = conversation(30)
    await pipeline(chat(messages), ctx_for())
    upstream.fail_first = len(upstream.sent) + 1  # the spliced request overflows once
    messages = next_turn(messages, "question 1")
    await pipeline(chat(messages), ctx := ctx_for())
    assert ctx.notes["attempts"] == "2"
    entry = await store.get("tenant-a", "conv-1")
    assert entry is not None
    assert chain_matches(messages, entry.historical_end_index, PROMPT_VERSION, entry.chain)
    await pipeline(chat(next_turn(messages, "question 2")), ctx := ctx_for())
    assert ctx.notes["action"].startswith("spliced")


async def test_a_remembered_turn_never_vouches_for_an_edited_or_branched_one(
    store: DiskHistoryStore,
) -> None:
    """After a spliced turn, the same layer sends an edited or a branched history whole."""
    extractor = Extractor()
    messages = conversation(30)
    await seed(store, extractor, messages)
    layer = HistorySplice(services(store, extractor, window=32768))
    spliced = Upstream()
    await layer.handle(chat(next_turn(messages)), ctx_for(), spliced)
    assert str(spliced.sent[0].messages[1]["content"]).startswith(CONTEXT_LABEL)

    def changed(index: int) -> list[dict[str, Any]]:
        """The history with one character of one message changed (its size the same)."""
        content = str(messages[index]["content"])
        return [*messages[:index], {**messages[index], "content": content[:-2] + "X "}]

    edited = next_turn(next_turn([*changed(9), *messages[10:]]), "and now?")
    branched = next_turn(next_turn([*changed(20), *messages[21:]]), "another way")
    for history in (edited, branched):
        upstream, ctx = Upstream(), ctx_for()
        await layer.handle(chat(history), ctx, upstream)
        assert upstream.sent[0].messages == tuple(history)
        assert "action" not in ctx.notes


async def test_a_request_keeps_one_history_for_all_its_layers(store: DiskHistoryStore) -> None:
    """The same request and context give the same History; another request its own."""
    layer = HistorySplice(services(store, Extractor()))
    request, ctx = chat(conversation(30)), ctx_for()
    first = layer.condenser.history(ctx, request)
    assert layer.condenser.history(ctx, request) is first
    other = chat(next_turn(conversation(30)))
    assert layer.condenser.history(ctx, other) is not first
    again = chat(next_turn(conversation(30)))  # the same turn sent again, parsed afresh
    assert layer.condenser.history(ctx_for(), again).known is not None


async def test_a_growth_quotes_the_condensed_messages_anew(store: DiskHistoryStore) -> None:
    """A growth quotes the facts of the messages the cached extraction stands in for, from
    the client's resent history: a line an earlier growth dropped comes back."""
    extractor = Extractor()
    messages, cached = await seeded_with_a_code(store, extractor)
    assert "ZX-4471" in cached.extraction
    await store.put(cached.model_copy(update={"extraction": SUMMARY}))  # a growth dropped it
    grown = await grown_later(store, extractor, messages)
    assert grown.historical_end_index > cached.historical_end_index
    assert "- user: Remember: our project code is ZX-4471." in grown.extraction


async def seeded_with_a_code(
    store: DiskHistoryStore, extractor: Extractor
) -> tuple[list[dict[str, Any]], HistoryEntry]:
    """A conversation whose first user turn states a code, and the entry seeding cached."""
    messages = conversation(30)
    messages[1] = {"role": "user", "content": "Remember: our project code is ZX-4471."}
    await seed(store, extractor, messages)
    cached = await store.get("tenant-a", "conv-1")
    assert cached is not None
    return messages, cached


async def grown_later(
    store: DiskHistoryStore, extractor: Extractor, messages: list[dict[str, Any]]
) -> HistoryEntry:
    """The entry after the conversation went on for 20 long turns and the splice grew it."""
    much_longer = [*messages]
    for turn in range(20):
        much_longer = next_turn(
            much_longer, f"turn {turn}: the user planned a trip " + "word " * 60
        )
    ctx = ctx_for()
    await HistorySplice(services(store, extractor)).handle(chat(much_longer), ctx, Upstream(40))
    assert ctx.notes["action"] == "spliced+extracted"
    grown = await store.get("tenant-a", "conv-1")
    assert grown is not None
    return grown


async def test_the_stored_entry_keeps_its_records_and_a_growth_reads_them(
    store: DiskHistoryStore,
) -> None:
    """The cached entry holds the records its extraction quotes (each naming its message's
    index), and the next growth reads those records, not the text: a carried note line only
    the records hold is accounted for (quoted, or a term of the merged line)."""
    extractor = Extractor()
    messages, cached = await seeded_with_a_code(store, extractor)
    records = cached.records()
    (stated,) = [fact for fact in records if "ZX-4471" in fact.text]
    assert (stated.role, stated.index) == ("user", 1)
    assert all(f"- {fact.role}: {fact.text}" in cached.extraction for fact in records)
    note = StoredFact(role="notes", text="The signing key is KEY-9071.", score=3, rule="notes")
    await store.put(cached.model_copy(update={"facts": stored_facts((*records, note))}))
    grown = await grown_later(store, extractor, messages)
    assert "KEY-9071" not in cached.extraction
    assert "KEY-9071" in grown.extraction
    kept = grown.records()
    assert any("KEY-9071" in (fact.text, *fact.terms) for fact in kept) or any(
        fact.text == note.text for fact in kept
    )


async def test_a_turn_that_only_splices_does_not_read_the_records(
    store: DiskHistoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A turn spliced from the cached extraction without growing it is served whole even
    when the entry's records are corrupt: only a growth reads them."""
    extractor = Extractor()
    messages, cached = await seeded_with_a_code(store, extractor)
    await store.put(cached.model_copy(update={"facts": '[["user"]]'}))
    upstream, ctx = Upstream(fits=40), ctx_for()
    with caplog.at_level(logging.WARNING):
        await HistorySplice(services(store, extractor, window=8192)).handle(
            chat(next_turn(messages)), ctx, upstream
        )
    assert ctx.notes["action"] == "spliced"
    stand_in = context_message(cached.extraction, cached.historical_end_index - 1)
    assert upstream.sent[0].messages[1] == stand_in
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert (await store.get("tenant-a", "conv-1")) == cached.model_copy(
        update={"facts": '[["user"]]'}
    )


@pytest.mark.parametrize("corrupt", [False, True])
async def test_a_growth_from_corrupt_records_condenses_the_whole_history(
    store: DiskHistoryStore, caplog: pytest.LogCaptureFixture, corrupt: bool
) -> None:
    """A growth whose cached entry's records do not validate logs them as corrupt and
    condenses the whole resent history as on a miss (its model is not told the entry's
    notes, as it is when the records are valid); the entry it stores, valid, replaces the
    corrupt one."""
    extractor = Extractor()
    messages, cached = await seeded_with_a_code(store, extractor)
    facts = '[["user", "x", "9"]]' if corrupt else cached.facts
    await store.put(cached.model_copy(update={"notes": "- The key is KEY-9071.", "facts": facts}))
    extractor.calls.clear()
    with caplog.at_level(logging.WARNING, logger="overspill.condense"):
        grown = await grown_later(store, extractor, messages)
    logged = [r for r in caplog.records if "corrupt ledger records" in r.getMessage()]
    assert [r.__dict__["error"] for r in logged] == (
        ["HistoryEntry record: facts.0.score: Input should be a valid integer"] if corrupt else []
    )
    told = any("KEY-9071" in str(call[-1]["content"]) for call in extractor.calls)
    assert told is not corrupt
    assert grown.historical_end_index > cached.historical_end_index
    assert any("ZX-4471" in fact.text for fact in grown.records())


def with_a_fact(turns: int) -> list[dict[str, Any]]:
    """A conversation whose third user turn says something the extraction does not keep."""
    messages = conversation(turns)
    messages[5] = {
        "role": "user",
        "content": "my sister works as a nurse at the children's hospital downtown",
    }
    return messages


async def test_the_condensed_turns_a_question_is_about_are_quoted_before_it(
    store: DiskHistoryStore,
) -> None:
    """A spliced request's latest user message gets the condensed turns that share its rare
    words, each with the reply after it, quoted and labelled before its own text; every
    message before it is as the splice made it, so the prefix the upstream cached is kept."""
    extractor = Extractor()
    messages = with_a_fact(30)
    await seed(store, extractor, messages)
    asked = next_turn(messages, "Where does my sister work as a nurse?")
    upstream, ctx = Upstream(fits=40), ctx_for()
    await HistorySplice(services(store, extractor, window=8192)).handle(chat(asked), ctx, upstream)
    (sent,) = upstream.sent
    stand_in = str(sent.messages[1]["content"])
    assert "children's hospital" not in stand_in
    last = str(sent.messages[-1]["content"])
    assert last.startswith(LABEL)
    said = "- user: my sister works as a nurse at the children's hospital downtown\n"
    assert f"{said}- assistant: reply 2 word" in last
    assert last.endswith(f"{END}\n\nWhere does my sister work as a nurse?")
    assert ctx.notes["relevant-turns"] == "2"
    plain = Upstream(fits=40)
    await HistorySplice(services(store, extractor, window=8192)).handle(
        chat(next_turn(messages)), ctx_for(), plain
    )
    assert sent.messages[:-1] == plain.sent[0].messages[:-1]


async def test_the_turns_a_quote_reads_follow_the_extraction_they_were_condensed_by(
    store: DiskHistoryStore,
) -> None:
    """One process quotes turn after turn from the condensed turns it read once; when the
    extraction is replaced by one condensing further, the turns it now stands for are read
    and quoted, not those the earlier one stood for."""
    extractor = Extractor()
    messages = with_a_fact(30)
    await seed(store, extractor, messages)
    cached = await store.get("tenant-a", "conv-1")
    assert cached is not None
    end = cached.historical_end_index
    brother = "my brother teaches chemistry at the old grammar school by the river"
    messages[end] = {"role": "user", "content": brother}
    layer = HistorySplice(services(store, extractor, window=8192))
    sister = "Where does my sister work as a nurse?"
    for turn in range(2):
        asked = next_turn(next_turn(messages, f"Thanks {turn}."), sister)
        upstream, ctx = Upstream(fits=40), ctx_for()
        await layer.handle(chat(asked), ctx, upstream)
        assert "children's hospital" in str(upstream.sent[0].messages[-1]["content"])
    further = end + 2
    await store.put(
        cached.model_copy(
            update={
                "historical_end_index": further,
                "message_count": further,
                "chain": chain(messages, further, PROMPT_VERSION),
            }
        )
    )
    asked = next_turn(messages, "Where does my brother teach chemistry?")
    upstream, ctx = Upstream(fits=40), ctx_for()
    await layer.handle(chat(asked), ctx, upstream)
    assert len(upstream.sent[0].messages) == len(asked) - further + 2  # system + stand-in
    assert f"- user: {brother}" in str(upstream.sent[0].messages[-1]["content"])


def zebras() -> list[dict[str, Any]]:
    """A conversation whose condensed turns mention a zebra often (a quote of many turns)."""
    messages = with_a_fact(60)
    for i in range(3, 100, 4):
        said = f"the zebra number {i} at the zoo ate hay " + "word " * 30
        messages[i] = {"role": "user", "content": said}
    return messages


def a_round(messages: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """The conversation after one more round of an agent's loop: a tool call, its result."""
    call = {"id": f"c{n}", "type": "function", "function": {"name": "fetch", "arguments": "{}"}}
    return [
        *messages,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{n}", "content": f"page {n}: " + "entry " * 150},
    ]


async def test_the_rounds_of_an_agent_loop_send_the_user_message_quoted_once(
    store: DiskHistoryStore,
) -> None:
    """The rounds that follow a user's message (tool calls and their results) send it with
    the block quoted on the first round, while the request with it fits the budget, though a
    longer tool traffic leaves less room than the block took: the message stays the bytes the
    upstream cached, and so does the traffic after it."""
    extractor = Extractor()
    messages = zebras()
    await seed(store, extractor, messages)
    layer = HistorySplice(services(store, extractor, window=4096))
    asked = next_turn(messages, "What did the zebra at the zoo eat?")
    kept: list[str] = []
    fresh: list[str] = []
    for n in range(12):
        for made, into in ((layer, kept), (HistorySplice(layer.condenser.services), fresh)):
            upstream, ctx = Upstream(fits=400), ctx_for()
            await made.handle(chat(asked), ctx, upstream)
            assert ctx.notes["action"] == "spliced"
            into.append(str(upstream.sent[0].messages[-1 - 2 * n]["content"]))
        asked = a_round(asked, n)
    assert kept[0].startswith(LABEL)
    assert kept[0].count("zebra") > 5
    assert kept == [kept[0]] * 12
    assert fresh[0] == kept[0]
    assert fresh[-1] != kept[0]  # picked anew: less room, less quoted


async def test_a_round_after_an_edited_turn_quotes_anew(store: DiskHistoryStore) -> None:
    """A round whose turns before the user's message differ from the round the block was
    quoted on (a client that edited one) gets a block picked from what it sent."""
    extractor = Extractor()
    messages = zebras()
    await seed(store, extractor, messages)
    layer = HistorySplice(services(store, extractor, window=8192))
    asked = next_turn(messages, "What did the zebra at the zoo eat?")
    upstream = Upstream(fits=400)
    await layer.handle(chat(asked), ctx_for(), upstream)
    first = str(upstream.sent[0].messages[-1]["content"])
    edited = [*asked]
    edited[-2] = {"role": "assistant", "content": "The zebra at the zoo eats carrots, zebra."}
    upstream = Upstream(fits=400)
    await layer.handle(chat(a_round(edited, 0)), ctx_for(), upstream)
    second = str(upstream.sent[0].messages[-3]["content"])
    assert "carrots" not in first
    assert "- assistant: The zebra at the zoo eats carrots, zebra." in second


async def test_the_tokens_after_a_splice_count_the_quoted_turns(
    store: DiskHistoryStore,
) -> None:
    """The splice's `tokens-after` note counts the quoted block it adds to the latest user
    message, so it is the size of the prompt that is sent, not of the prompt before quoting."""
    extractor = Extractor()
    messages = with_a_fact(30)
    await seed(store, extractor, messages)
    asked = chat(next_turn(messages, "Where does my sister work as a nurse?"))
    off = CONFIG.replace("max_output_tokens: 128}", "max_output_tokens: 128, relevant_share: 0}")
    after: dict[str, int] = {}
    for config in (off, CONFIG):
        served = make_services(
            settings_from(config), store, lambda name: extractor, {"local": 8192}
        )
        ctx = ctx_for(config)
        await HistorySplice(served).handle(asked, ctx, Upstream(fits=40))
        after[config] = int(ctx.notes["tokens-after"])
    block, model = str(ctx.derived["relevant-turns"]), ctx.model
    assert model is not None
    counted = served.estimator.counter(model).count_text(block)
    assert counted <= after[CONFIG] - after[off] <= counted + 2


async def test_a_newest_turn_matching_the_question_best_is_quoted_again_last(
    store: DiskHistoryStore,
) -> None:
    """When a turn sent verbatim matches the latest user message better than any condensed
    turn, it is quoted again after the condensed ones, right before the message, so the older
    excerpts do not stand between the question and the turn it follows from."""
    extractor = Extractor()
    messages = with_a_fact(30)
    await seed(store, extractor, messages)
    said = "my sister's night shift at the hospital moved to the burns ward on fridays"
    asked = [
        *next_turn(messages, said),
        {"role": "assistant", "content": "Noted: the burns ward, Friday nights."},
        {"role": "user", "content": "Which ward is my sister's hospital shift on, fridays?"},
    ]
    upstream, ctx = Upstream(fits=40), ctx_for()
    await HistorySplice(services(store, extractor, window=8192)).handle(chat(asked), ctx, upstream)
    (sent,) = upstream.sent
    last = str(sent.messages[-1]["content"])
    condensed = "- user: my sister works as a nurse at the children's hospital downtown\n"
    newest = f"- user: {said}\n- assistant: Noted: the burns ward, Friday nights.\n{END}"
    assert condensed in last
    assert last.index(condensed) < last.index(newest)
    assert last.endswith(f"{newest}\n\nWhich ward is my sister's hospital shift on, fridays?")


async def test_a_condensed_turn_a_later_one_corrected_is_not_quoted_back(
    store: DiskHistoryStore,
) -> None:
    """A turn whose statement the extraction's ledger records as replaced by a later turn is
    left out of the quoted turns; the extraction quotes the correction."""
    extractor = Extractor()
    messages = conversation(30)
    messages[5] = {"role": "user", "content": "The staging database listens on port 5432."}
    messages[9] = {
        "role": "user",
        "content": "Correction: the staging database listens on port 6543 now, not 5432.",
    }
    await seed(store, extractor, messages)
    cached = await store.get("tenant-a", "conv-1")
    assert cached is not None
    replaced = {fact.supersedes for fact in cached.records()}
    assert "The staging database listens on port 5432." in replaced
    asked = next_turn(messages, "Which port does the staging database listen on?")
    upstream, ctx = Upstream(fits=40), ctx_for()
    await HistorySplice(services(store, extractor, window=8192)).handle(chat(asked), ctx, upstream)
    last = str(upstream.sent[0].messages[-1]["content"])
    assert "listens on port 5432." not in last  # quoted when nothing said it was replaced
    assert "port 6543 now, not 5432." in str(upstream.sent[0].messages[1]["content"])


async def test_a_condensed_turn_the_verbatim_turns_correct_is_not_quoted_back(
    store: DiskHistoryStore,
) -> None:
    """A condensed statement that a user's turn after the extraction corrects, and the reply
    that repeated it, are left out of the quoted turns, which stand after that correction;
    uncorrected, the reply is quoted after the statement the extraction shows."""
    extractor = Extractor()
    messages = conversation(30)
    messages[5] = {"role": "user", "content": "The staging database listens on port 5432."}
    messages[6] = {"role": "assistant", "content": "Noted: the staging database is on 5432."}
    await seed(store, extractor, messages)
    question = "Which port does the staging database listen on?"
    correction = "Correction: the staging database listens on port 6543 now, not 5432."
    for later, quoted in (("Thanks.", True), (correction, False)):
        asked = next_turn(next_turn(messages, later), question)
        upstream = Upstream(fits=40)
        await HistorySplice(services(store, extractor, window=8192)).handle(
            chat(asked), ctx_for(), upstream
        )
        sent = upstream.sent[0].messages
        assert later in str(sent[-3]["content"])  # the turn is in the verbatim tail
        assert ("the staging database is on 5432." in str(sent[-1]["content"])) is quoted


async def test_recall_can_be_turned_off_and_needs_room(store: DiskHistoryStore) -> None:
    """`context.relevant_share: 0` quotes nothing; nor does a request with no room left."""
    extractor = Extractor()
    messages = with_a_fact(30)
    await seed(store, extractor, messages)
    asked = chat(next_turn(messages, "Where does my sister work as a nurse?"))
    off = CONFIG.replace("max_output_tokens: 128}", "max_output_tokens: 128, relevant_share: 0}")
    quiet = make_services(settings_from(off), store, lambda name: extractor, {"local": 8192})
    for shared in (quiet, services(store, extractor, window=8192)):
        upstream, ctx = Upstream(fits=40), ctx_for(off if shared is quiet else CONFIG)
        await HistorySplice(shared).handle(asked, ctx, upstream)
        recalled = LABEL in str(upstream.sent[0].messages[-1]["content"])
        assert recalled == (shared is not quiet)
        assert ("relevant-turns" in ctx.notes) == recalled


class CheckedEarly:
    """The store as a second replica saw it when it checked for a running growth just before
    the first one took the conversation's flight: none running. Everything else is the
    store itself."""

    def __init__(self, store: DiskHistoryStore) -> None:
        self.store = store

    async def flight_busy(self, tenant: str, conversation: str) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


async def test_a_turn_that_waited_for_anothers_growth_uses_it_even_if_its_plan_ends_elsewhere(
    store: DiskHistoryStore,
) -> None:
    """Two replicas whose windows (or estimates) differ plan the same conversation's growth a
    few messages apart; the one that waited for the other's flight splices what it stored
    instead of extracting the conversation again."""
    gate = asyncio.Event()
    extractor = Extractor(gate=gate)
    messages = conversation(30)
    first, second = (HistorySplice(services(store, extractor, window=w)) for w in (3000, 3400))
    second.store = CheckedEarly(store)
    ctx_a, ctx_b = ctx_for(), ctx_for()
    up_a, up_b = Upstream(fits=40), Upstream(fits=40)
    growing = asyncio.create_task(first.handle(chat(messages), ctx_a, up_a))
    await extractor.started.wait()  # the first holds the flight, its extraction under way
    waiting = asyncio.create_task(second.handle(chat(messages), ctx_b, up_b))
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(growing, waiting)
    stored = await store.get("tenant-a", "conv-1")
    assert stored is not None
    assert len(extractor.calls) == int(ctx_a.notes["extraction-calls"])  # none by the second
    assert ctx_b.notes["waited"] == "extraction"
    assert ctx_b.notes["action"] == "spliced"
    assert "extraction-calls" not in ctx_b.notes
    assert ctx_b.notes["messages-replaced"] == str(stored.historical_end_index - 1)
    assert str(up_b.sent[0].messages[1]["content"]).endswith(stored.extraction)
