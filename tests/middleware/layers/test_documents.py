"""The documents layer: extension parsing, the pure planner (properties), and the layer."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.documents_config import LANGUAGES, DocumentsSettings
from kernel.errors import DocumentsBudgetExceeded, InvalidChatRequest
from kernel.services import Services
from kernel.store import DiskHistoryStore
from kernel.tokens import count_text
from kernel.types import ChatRequest, RequestContext
from middleware.documents.blocks import BLOCK_HEADER
from middleware.documents.plan import (
    BatchPlan,
    apply_rules,
    arrange,
    batch_tokens,
    drop_to_fit,
    most_relevant_last,
    plan_batch,
    rank,
    render_batch,
)
from middleware.documents.ranking import top_k
from middleware.documents.request import Document, parse_compact, parse_documents
from middleware.layers.documents import Documents
from providers.fake import ScriptedProvider, json_response
from tests.conftest import AppClient, StaticWindows, make_services, settings_from
from tests.middleware.layers.test_overflow_recovery import Extractor, Upstream, conversation

CONFIG = """
model_list:
  - model_name: local
    litellm_params: {model: openai/smollm2, api_base: "http://upstream.test/v1"}
    context: {window: 2048, max_output_tokens: 128}
"""
SQL = "-- all orders\nSELECT id, total\nFROM orders\nWHERE total > 10;\n"
PY = "import os\n\n# comment\ndef f(x):\n    return x  # note\n"


def count(text: str) -> int:
    return count_text(text) + 1


def doc(index: int, text: str = "some words", score: float | None = None, **kw: Any) -> Document:
    return Document(index=index, text=text, id=kw.pop("id", f"d{index}"), score=score, **kw)


def rules(*items: dict[str, Any]) -> DocumentsSettings:
    return DocumentsSettings.model_validate({"rules": list(items)})


# --- the request extension ---------------------------------------------------------------------


def test_parse_documents_fills_defaults_and_canonical_languages() -> None:
    """Optional fields default (id from the position), languages map to canonical names."""
    docs = parse_documents(
        [
            {"text": "a"},
            {"id": "q-17", "text": "b", "score": 1, "source": "x.cs", "language": "dotnet"},
        ]
    )
    assert docs[0] == Document(index=0, text="a", id="doc-1")
    assert docs[1].id == "q-17"
    assert docs[1].score == 1.0
    assert docs[1].language == "csharp"


@pytest.mark.parametrize(
    ("value", "param"),
    [
        ({"text": "x"}, "documents"),
        (
            [{"text": "x"}, {"text": "y"}, {"text": "z"}, {"text": "w", "score": "high"}],
            "documents[3].score",
        ),
        ([{"text": "x", "score": float("nan")}], "documents[0].score"),
        ([{"text": "x", "score": True}], "documents[0].score"),
        ([{"text": ""}], "documents[0].text"),
        ([{"id": "a"}], "documents[0].text"),
        (["just text"], "documents[0]"),
        ([{"text": "x", "language": "cobol"}], "documents[0].language"),
        ([{"text": "x", "source": 3}], "documents[0].source"),
        ([{"text": "x", "id": ""}], "documents[0].id"),
        ([{"text": "x", "id": "a"}, {"text": "y", "id": "a"}], "documents[1].id"),
        ([{"text": "x", "title": "t"}], "documents[0].title"),
    ],
)
def test_bad_documents_name_the_field(value: object, param: str) -> None:
    """Every bad field is a 400 whose `param` names it."""
    with pytest.raises(InvalidChatRequest) as caught:
        parse_documents(value)
    assert caught.value.param == param
    assert caught.value.http_status() == 400


def test_parse_compact() -> None:
    """`overspill.compact` takes language names, aliases, `*` or true; anything else is a 400."""
    assert parse_compact(None) == frozenset()
    assert parse_compact(["sql", "dotnet"]) == {"sql", "csharp"}
    assert parse_compact(True) == {"*"}
    with pytest.raises(InvalidChatRequest) as caught:
        parse_compact(["sql", "cobol"])
    assert caught.value.param == "overspill.compact[1]"
    with pytest.raises(InvalidChatRequest):
        parse_compact("sql")


# --- the planner -------------------------------------------------------------------------------


def test_rank_by_score_then_unscored_in_order() -> None:
    """Most relevant first; documents without a score follow in the order they came."""
    docs = [doc(0), doc(1, score=0.2), doc(2), doc(3, score=0.9)]
    assert [d.index for d in rank(docs)] == [3, 1, 0, 2]


def test_order_is_best_last_for_ollama_and_first_otherwise() -> None:
    """`auto` puts the most relevant last for ollama_chat/ and ollama/ models only."""
    auto = DocumentsSettings()
    assert most_relevant_last(auto, "ollama_chat/llama3")
    assert most_relevant_last(auto, "ollama/llama3")
    assert not most_relevant_last(auto, "openai/gpt-4o")
    assert not most_relevant_last(DocumentsSettings(order="most_relevant_first"), "ollama/x")
    placed = apply_rules(
        rank([doc(0, score=0.1), doc(1, score=0.9)]),
        auto,
        budget=10_000,
        context_tokens=0,
        demanded=frozenset(),
        count=count,
    )
    assert [p.doc.index for p in arrange(placed, True)] == [0, 1]
    assert [p.doc.index for p in arrange(placed, False)] == [1, 0]


def test_policies() -> None:
    """always compacts; demand only when asked; no rule never; threshold past its share."""
    docs = [doc(0, SQL, language="sql"), doc(1, PY, language="python")]
    settings_ = rules(
        {"language": "sql", "policy": "always"}, {"language": "*", "policy": "demand"}
    )

    def how(demanded: frozenset[str]) -> list[str]:
        placed = apply_rules(
            docs, settings_, budget=10_000, context_tokens=0, demanded=demanded, count=count
        )
        return [p.how for p in placed]

    assert how(frozenset()) == ["compacted", "raw"]
    assert how(frozenset({"python"})) == ["compacted", "compacted"]
    assert how(frozenset({"*"})) == ["compacted", "compacted"]
    none = apply_rules(
        docs,
        DocumentsSettings(),
        budget=10_000,
        context_tokens=0,
        demanded=frozenset(),
        count=count,
    )
    assert [p.policy for p in none] == ["none", "none"]


def test_threshold_compacts_only_past_its_share_of_the_budget() -> None:
    """threshold 0.5 of 100: raw when context + block stay under 50, compacted past it."""
    settings_ = rules({"language": "sql", "policy": "threshold", "threshold": 0.5})
    sql = doc(0, SQL, language="sql")
    tokens = count_text(SQL)
    for context, expected in ((0, "raw"), (50 - tokens, "compacted")):
        (placed,) = apply_rules(
            [sql], settings_, budget=100, context_tokens=context, demanded=frozenset(), count=count
        )
        assert placed.how == expected


def test_top_k_clamp() -> None:
    """clamp(room / avg, 2, 10) with the documents' default settings."""
    s = DocumentsSettings()
    assert top_k(-5, s.avg_chunk_tokens, s.min_top_k, s.max_top_k) == 2
    assert top_k(700, s.avg_chunk_tokens, s.min_top_k, s.max_top_k) == 3
    assert top_k(100_000, s.avg_chunk_tokens, s.min_top_k, s.max_top_k) == 10


def test_tight_budget_keeps_the_top_k_best() -> None:
    """When the batch does not fit the room, only the top_k most relevant are kept."""
    docs = [doc(i, "word " * 150, score=i / 20) for i in range(12)]
    plan = plan_batch(
        docs,
        DocumentsSettings(),
        budget=2000,
        context_tokens=1500,
        demanded=frozenset(),
        count=count,
        question=None,
    )
    assert plan.top_k == 2
    assert [p.doc.index for p in plan.placed] == [11, 10]


def test_documents_alone_over_budget_are_refused_with_the_numbers() -> None:
    """Documents of which not even one chunk fits the budget: 400 documents_budget_exceeded."""
    with pytest.raises(DocumentsBudgetExceeded) as caught:
        plan_batch(
            [doc(0, "word " * 400), doc(1, "word " * 400)],
            DocumentsSettings(),
            budget=40,
            context_tokens=0,
            demanded=frozenset(),
            count=count,
            question=None,
        )
    error = caught.value
    assert error.error_code() == "documents_budget_exceeded"
    assert error.http_status() == 400
    assert error.budget == 40
    assert error.documents_tokens > 800
    assert error.headers()["x-overspill-documents-budget"] == "40"


words = st.text(alphabet="abcdefgh ijk\n;(){}#-", min_size=1, max_size=300).filter(str.strip)
doc_lists = st.lists(
    st.tuples(words, st.none() | st.floats(0, 1), st.sampled_from([None, *LANGUAGES])),
    min_size=1,
    max_size=12,
)
rule_lists: st.SearchStrategy[list[dict[str, Any]]] = st.lists(
    st.builds(
        dict,
        language=st.sampled_from(["*", *LANGUAGES]),
        policy=st.sampled_from(["always", "demand"]),
    )
    | st.builds(dict, language=st.sampled_from(LANGUAGES), policy=st.just("threshold"),
                threshold=st.floats(0.01, 1)),
    max_size=4,
)  # fmt: skip


def _docs(items: list[tuple[str, float | None, str | None]]) -> list[Document]:
    return [doc(i, text, score, language=lang) for i, (text, score, lang) in enumerate(items)]


@settings(max_examples=60, deadline=None)
@given(doc_lists, rule_lists, st.integers(50, 4000), st.integers(0, 3000))
def test_a_plan_is_never_over_budget(
    items: list[tuple[str, float | None, str | None]],
    rule_list: list[dict[str, Any]],
    budget: int,
    context: int,
) -> None:
    """Planned, refused, or dropped to fit: never over budget, and the estimate bounds the
    rendered batch's real token count."""
    settings_ = DocumentsSettings.model_validate({"rules": rule_list})
    refused: DocumentsBudgetExceeded | None = None
    try:
        plan = plan_batch(
            _docs(items),
            settings_,
            budget=budget,
            context_tokens=context,
            demanded=frozenset(),
            count=count,
            question=None,
        )
    except DocumentsBudgetExceeded as error:
        refused = error
    if refused is not None:
        assert refused.documents_tokens > budget
        return
    assert plan.tokens <= budget
    fitted = drop_to_fit(plan)
    assert fitted.context_tokens + fitted.tokens <= budget or not fitted.placed
    rendered = render_batch(fitted.placed, settings_.divider)
    if fitted.placed:
        assert count_text(rendered) + 4 <= batch_tokens(fitted.placed)


@settings(max_examples=40, deadline=None)
@given(doc_lists, rule_lists)
def test_plans_are_deterministic(
    items: list[tuple[str, float | None, str | None]], rule_list: list[dict[str, Any]]
) -> None:
    """The same request gives the same bytes."""
    settings_ = DocumentsSettings.model_validate({"rules": rule_list})

    def once() -> str:
        plan = plan_batch(
            _docs(items),
            settings_,
            budget=10**6,
            context_tokens=0,
            demanded=frozenset({"sql"}),
            count=count,
            question="which orders",
        )
        return render_batch(plan.placed, settings_.divider)

    assert once() == once()


@settings(max_examples=60, deadline=None)
@given(rule_lists, st.sampled_from(LANGUAGES))
def test_the_first_matching_rule_wins(rule_list: list[dict[str, Any]], language: str) -> None:
    """A document's policy is that of the first rule naming its language (or `*`)."""
    settings_ = DocumentsSettings.model_validate({"rules": rule_list})
    expected = next((r["policy"] for r in rule_list if r["language"] in ("*", language)), "none")
    (placed,) = apply_rules(
        [doc(0, "x = 1", language=language)],
        settings_,
        budget=1000,
        context_tokens=0,
        demanded=frozenset(),
        count=count,
    )
    assert placed.policy == expected


@settings(max_examples=40, deadline=None)
@given(doc_lists)
def test_the_divider_comes_once_per_batch(
    items: list[tuple[str, float | None, str | None]],
) -> None:
    """One divider line first, then one block per document."""
    settings_ = DocumentsSettings()
    plan = plan_batch(
        _docs(items),
        settings_,
        budget=10**6,
        context_tokens=0,
        demanded=frozenset(),
        count=count,
        question=None,
    )
    rendered = render_batch(plan.placed, settings_.divider)
    assert rendered.startswith(settings_.divider + "\n")
    assert rendered.count(settings_.divider) == 1
    assert rendered.count(BLOCK_HEADER) == len(items)


def test_block_format() -> None:
    """The deterministic block: header, id, source, language, compact flag, text."""
    (placed,) = apply_rules(
        [doc(0, "SELECT 1", id="q-17", source="db/orders.sql", language="sql")],
        DocumentsSettings(),
        budget=1000,
        context_tokens=0,
        demanded=frozenset(),
        count=count,
    )
    assert render_batch([placed], "<<<New content") == (
        "<<<New content\n\n--- DOCUMENT ---\nid: q-17\nsource: db/orders.sql\nlanguage: sql\n"
        "compact: false\ntext:\nSELECT 1"
    )


# --- the layer ---------------------------------------------------------------------------------


def services(store: DiskHistoryStore, extractor: Extractor, documents: str = "") -> Services:
    config = CONFIG + (f"documents:\n{documents}" if documents else "")
    return make_services(settings_from(config), store, lambda name: extractor, {"local": 2048})


def layer(
    store: DiskHistoryStore, extractor: Extractor | None = None, documents: str = ""
) -> Documents:
    return Documents(services(store, extractor or Extractor(), documents))


def ctx_for(conversation_id: str = "conv-1") -> RequestContext:
    ctx = RequestContext("rid", "tenant-a", conversation_hint=conversation_id)
    ctx.model = settings_from(CONFIG).model_list[0]
    return ctx


def request_with(
    messages: list[dict[str, Any]], documents: list[dict[str, Any]], **overspill: Any
) -> ChatRequest:
    body = {"model": "local", "messages": messages}
    extensions: dict[str, Any] = {"documents": documents}
    if overspill:
        extensions["overspill"] = overspill
    return ChatRequest("local", tuple(messages), False, body, extensions=extensions)


QUESTION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Which orders?"},
]


async def test_documents_that_fit_go_in_one_message_before_the_question(
    store: DiskHistoryStore,
) -> None:
    """One user message with the divider and the blocks, just before the last user message."""
    upstream, ctx = Upstream(), ctx_for()
    docs = [{"id": "a", "text": "low", "score": 0.1}, {"id": "b", "text": SQL, "score": 0.9}]
    await layer(store).handle(request_with(QUESTION, docs), ctx, upstream)
    (sent,) = upstream.sent
    assert [m["role"] for m in sent.messages] == ["system", "user", "user"]
    assert sent.messages[-1] == QUESTION[-1]
    content = str(sent.messages[1]["content"])
    assert content.startswith("<<<New content\n")
    assert content.index("id: b") < content.index("id: a")
    assert "documents" not in sent.extensions
    assert ctx.notes["documents"] == "2/2"
    assert ctx.notes["documents-decision"] == "appended"


async def test_one_trace_event_per_request(
    store: DiskHistoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """`documents_budget` is logged once, with each document's language, policy and sizes."""
    with caplog.at_level(logging.INFO, logger="overspill.documents"):
        await layer(store, documents="  rules: [{language: sql, policy: always}]\n").handle(
            request_with(QUESTION, [{"text": SQL, "source": "q.sql"}]), ctx_for(), Upstream()
        )
    (event,) = [r for r in caplog.records if r.getMessage() == "documents_budget"]
    (trace,) = event.__dict__["documents"]
    assert trace["language"] == "sql"
    assert trace["policy"] == "always"
    assert trace["compacted"] == "compacted"
    assert trace["tokens_after"] < trace["tokens_before"]
    assert event.__dict__["decision"] == "appended"


async def test_documents_alone_over_budget_are_a_400(store: DiskHistoryStore) -> None:
    """Documents not one chunk of which fits the budget are refused before any upstream call."""
    upstream = Upstream()
    with pytest.raises(DocumentsBudgetExceeded):
        await layer(store, documents="  max_context_tokens: 40\n").handle(
            request_with(QUESTION, [{"text": "word " * 400}, {"text": "word " * 400}]),
            ctx_for(),
            upstream,
        )
    assert upstream.sent == []


async def test_documents_over_the_whole_budget_go_as_their_chunks_about_the_question(
    store: DiskHistoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A manual over the budget goes as its chunk about the question, ids in the trace."""
    sections = [
        f"Section {i}: "
        + ("refunds are paid within a week. " if i == 30 else "orders ship daily. ") * 9
        for i in range(60)
    ]
    question = [{"role": "user", "content": "How fast are refunds paid?"}]
    upstream, ctx = Upstream(), ctx_for()
    with caplog.at_level(logging.INFO, logger="overspill.documents"):
        await layer(store, documents="  max_context_tokens: 600\n").handle(
            request_with(question, [{"id": "manual", "text": "\n".join(sections)}]), ctx, upstream
        )
    (sent,) = upstream.sent
    content = str(sent.messages[0]["content"])
    assert "compact: chunked" in content
    assert "refunds are paid within a week" in content
    assert ctx.notes["documents-decision"] == "appended+chunked"
    assert int(ctx.notes["documents-tokens"]) <= 600
    (event,) = [r for r in caplog.records if r.getMessage() == "documents_budget"]
    (trace,) = event.__dict__["documents"]
    assert trace["compacted"] == "chunked"
    assert all(c["id"].startswith("manual::chunk::") for c in trace["chunks"])


async def test_documents_over_the_share_are_condensed_one_by_one(store: DiskHistoryStore) -> None:
    """Above 85% of the budget each document is condensed by an internal call."""
    extractor = Extractor("Orders over 10 are listed in the orders table.")
    ctx = ctx_for()
    upstream = Upstream()
    docs = [
        {"text": f"Order {i} note: " + "the customer asked about delivery " * 76} for i in range(4)
    ]
    await layer(store, extractor).handle(request_with(QUESTION, docs), ctx, upstream)
    assert len(extractor.calls) == 4
    assert ctx.notes["documents-decision"] == "appended+condensed"
    assert "compact: condensed" in str(upstream.sent[0].messages[1]["content"])


async def test_a_long_conversation_is_compacted_to_make_room(store: DiskHistoryStore) -> None:
    """Conversation + documents over budget: the history is extracted, then the batch fits."""
    extractor = Extractor()
    ctx = ctx_for()
    upstream = Upstream()
    docs = [{"text": "Order 7 shipped on 3 May.", "score": 0.5}]
    await layer(store, extractor).handle(request_with(conversation(12), docs), ctx, upstream)
    assert extractor.calls
    assert "context_compacted=" in ctx.notes["documents-decision"]
    sent = upstream.sent[0].messages
    assert len(sent) < len(conversation(12)) + 1
    assert sum(BLOCK_HEADER in str(m["content"]) for m in sent) == 1


async def test_earlier_batches_are_the_existing_context(store: DiskHistoryStore) -> None:
    """Next turn: the earlier batch is back where it was, the new one has its own divider;
    a retried turn does not repeat its batch."""
    docs_layer = layer(store)
    first = request_with(QUESTION, [{"text": "first batch"}])
    await docs_layer.handle(first, ctx_for(), Upstream())
    turn_two = [
        *QUESTION,
        {"role": "assistant", "content": "Orders 1-3."},
        {"role": "user", "content": "And 4?"},
    ]
    for _ in range(2):  # the second time is a retry of the same turn
        upstream = Upstream()
        await docs_layer.handle(
            request_with(turn_two, [{"text": "second batch"}]), ctx_for(), upstream
        )
        contents = [str(m["content"]) for m in upstream.sent[0].messages]
        assert [c.count("<<<New content") for c in contents] == [0, 1, 0, 0, 1, 0]
        assert "first batch" in contents[1]
        assert "second batch" in contents[4]


async def test_without_documents_the_layer_does_nothing(store: DiskHistoryStore) -> None:
    """No `documents` extension: the request passes untouched and nothing is noted."""
    upstream, ctx = Upstream(), ctx_for()
    request = ChatRequest("local", tuple(QUESTION), False, {"model": "local", "messages": QUESTION})
    await layer(store).handle(request, ctx, upstream)
    assert upstream.sent == [request]
    assert ctx.notes == {}


def test_batch_plan_fits() -> None:
    """fits compares conversation + batch with the budget."""
    assert BatchPlan((), 0, 10, 10, None).fits
    assert not BatchPlan((), 0, 10, 11, None).fits


APP_CONFIG = (
    CONFIG
    + """general_settings: {master_key: sk-master}
middleware: [documents]
documents: {max_context_tokens: 300}
"""
)


async def test_through_the_app_documents_are_stripped_and_reported(app_client: AppClient) -> None:
    """Over HTTP: the upstream body has no `documents`, the batch is in the messages, and the
    headers summarise; documents over the budget go as chunks, and when not one chunk fits the
    budget they are a 400 with the numbers."""
    provider = ScriptedProvider([json_response("ok")])
    client = app_client(
        {"local": [provider]}, settings=settings_from(APP_CONFIG), registry={"documents": Documents}
    )
    body = {"model": "local", "messages": QUESTION, "documents": [{"text": "Order 1: 250 EUR"}]}
    response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    assert response.headers["x-overspill-documents"] == "1/1"
    (sent,) = provider.requests
    assert "documents" not in sent.upstream_body("smollm2")
    assert "Order 1: 250 EUR" in str(sent.messages[1]["content"])

    body["documents"] = [{"text": "word " * 400}]
    chunked = await client.post("/v1/chat/completions", json=body)
    assert chunked.status_code == 200
    assert chunked.headers["x-overspill-documents-compacted"] == "1"
    assert "compact: chunked" in str(provider.requests[-1].messages[1]["content"])

    tiny = settings_from(APP_CONFIG.replace("max_context_tokens: 300", "max_context_tokens: 40"))
    refused = await app_client(
        {"local": [provider]}, settings=tiny, registry={"documents": Documents}
    ).post("/v1/chat/completions", json=body)
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "documents_budget_exceeded"
    assert refused.headers["x-overspill-documents-budget"] == "40"


OLLAMA_CONFIG = """
model_list:
  - model_name: local
    litellm_params: {model: ollama_chat/llama3.2, api_base: "http://ollama.test"}
"""


async def test_an_ollama_targets_budget_comes_from_the_window_it_runs_with(
    store: DiskHistoryStore,
) -> None:
    """The documents budget for Ollama is num_ctx x 0.75 - reserve - system, from
    the discovered window, not litellm's trained maximum (128k for llama3.2)."""
    settings = settings_from(OLLAMA_CONFIG)
    windows = StaticWindows({"local": 4096}, source="ps")
    documents = Documents(make_services(settings, store, lambda name: Extractor(), windows))
    ctx = RequestContext("rid", "tenant-a", model=settings.model_list[0], conversation_hint="c")
    messages = [{"role": "user", "content": "Which query is slow?"}]
    upstream = Upstream()
    await documents.handle(request_with(messages, [{"text": "SELECT 1"}]), ctx, upstream)
    assert int(ctx.notes["documents-budget"]) == 4096 * 3 // 4 - 512
    assert windows.asked == 1


async def first_turn_then_second(store: DiskHistoryStore) -> list[dict[str, Any]]:
    """Place a first batch (with one layer), and give the next turn's messages."""
    await layer(store).handle(
        request_with(QUESTION, [{"text": "first batch"}]), ctx_for(), Upstream()
    )
    return [
        *QUESTION,
        {"role": "assistant", "content": "Orders 1-3."},
        {"role": "user", "content": "And 4?"},
    ]


async def test_earlier_batches_live_in_the_store_not_the_process(store: DiskHistoryStore) -> None:
    """A new layer (another replica, or after a restart) on the same store puts the earlier
    batch back where the first one placed it."""
    turn_two = await first_turn_then_second(store)
    upstream = Upstream()
    await layer(store).handle(request_with(turn_two, [{"text": "second"}]), ctx_for(), upstream)
    contents = [str(m["content"]) for m in upstream.sent[0].messages]
    assert "first batch" in contents[1]
    stored = await store.get_batches("tenant-a", "conv-1")
    assert stored is not None
    assert [b.position for b in stored.batches] == [1, 3]


async def test_an_empty_documents_list_keeps_earlier_batches_in_place(
    store: DiskHistoryStore,
) -> None:
    """`documents: []` on a later turn sends the earlier batches where they were, so the
    conversation (and the prefix a cached extraction covers) stays the same."""
    turn_two = await first_turn_then_second(store)
    upstream = Upstream()
    await layer(store).handle(request_with(turn_two, []), ctx_for(), upstream)
    contents = [str(m["content"]) for m in upstream.sent[0].messages]
    assert len(contents) == len(turn_two) + 1
    assert "first batch" in contents[1]
