"""The ollama_window layer: num_ctx, pre-flight, truncation check, and report."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
import respx
from hypothesis import given
from hypothesis import strategies as st

from kernel.config import ModelEntry
from kernel.errors import ContextWindowExceeded, OverspillError
from kernel.services import Services, Window, Windows
from kernel.store import DiskHistoryStore
from kernel.tokens import count_messages
from kernel.types import ChatRequest, ChatResponse, Completion, RequestContext
from middleware.layers.ollama_window import OllamaWindow, looks_truncated
from middleware.layers.overflow_recovery import OverflowRecovery
from middleware.pipeline import compose
from providers.fake import completion, json_response, sse_events
from providers.litellm import LitellmProvider
from providers.ollama import OllamaWindows
from providers.windows import ModelWindows
from tests.conftest import make_services, sample, settings_from
from tests.fakes.ollama import FakeModel, FakeOllama

CONFIG = """
model_list:
  - model_name: local
    litellm_params: {model: ollama_chat/smollm2, api_base: "http://ollama.test"}
    ollama: {report_in_body: REPORT}
  - model_name: remote
    litellm_params: {model: openai/gpt-4o, api_base: "http://upstream.test/v1"}
"""


def Resolved(tokens: int, source: str = "ps", capped_by: str | None = None) -> Window:
    """A window as discovery reports it."""
    return Window(tokens, source, capped_by)


class Resolver:
    """Windows that answer one window for every model and count the questions."""

    def __init__(self, window: Window) -> None:
        self.answer = window
        self.asked: list[str] = []

    async def of(self, entry: ModelEntry) -> Window:
        self.asked.append(entry.model_name)
        return self.answer


class Upstream:
    """The rest of the pipeline: records requests and answers `prompt_tokens` (or the count)."""

    def __init__(self, prompt_tokens: int | None = None, stream: bool = False) -> None:
        self.prompt_tokens = prompt_tokens
        self.stream = stream
        self.sent: list[ChatRequest] = []

    async def __call__(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        self.sent.append(request)
        tokens = self.prompt_tokens or count_messages(request.messages)
        if not self.stream:
            return json_response("ok", prompt_tokens=tokens)
        usage = {
            "id": "c",
            "object": "chat.completion.chunk",
            "choices": [],
            "usage": {"prompt_tokens": tokens, "completion_tokens": 1, "total_tokens": tokens + 1},
        }
        events = [
            *sse_events(["o", "k"])[:-1],
            b"data: " + orjson.dumps(usage) + b"\n\n",
            b"data: [DONE]\n\n",
        ]
        return ChatResponse(stream=_iterate(events))


async def _iterate(events: list[bytes]) -> AsyncIterator[bytes]:
    for event in events:
        yield event


class Extractor:
    """A scripted extraction model for overflow_recovery."""

    async def __call__(self, messages: Any, *, max_tokens: int) -> Completion:
        return Completion("Notes:\n- The user planned a trip.", 100, 10, "stop")


def services(
    store: DiskHistoryStore, report: bool = False, resolver: Windows | None = None
) -> Services:
    settings = settings_from(CONFIG.replace("REPORT", str(report).lower()))
    windows = resolver or Resolver(Resolved(128000))
    return make_services(settings, store, lambda name: Extractor(), windows)


def ctx_for(store: DiskHistoryStore, model: str = "local", report: bool = False) -> RequestContext:
    ctx = RequestContext("rid", "tenant-a", conversation_hint="c1")
    ctx.model = next(
        e for e in services(store, report).settings.model_list if e.model_name == model
    )
    return ctx


def chat(
    messages: list[dict[str, Any]], model: str = "local", stream: bool = False, **params: Any
) -> ChatRequest:
    body = {"model": model, "messages": messages, "stream": stream, **params}
    return ChatRequest(model, tuple(messages), stream, body, raw=orjson.dumps(body))


def talk(turns: int, words: int = 40) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be helpful."}]
    for turn in range(turns):
        messages.append(
            {"role": "user", "content": f"turn {turn} we planned a trip " + "word " * words}
        )
        messages.append({"role": "assistant", "content": f"reply {turn} " + "word " * words})
    messages.append({"role": "user", "content": "What did we plan?"})
    return messages


# --- the layer ----------------------------------------------------------------------------------


async def test_other_models_pass_through_untouched(store: DiskHistoryStore) -> None:
    """A non-Ollama model is forwarded as it came: same request, no notes, no window lookup."""
    resolver, upstream = Resolver(Resolved(2048)), Upstream()
    ctx = ctx_for(store, "remote")
    request = chat(talk(200), model="remote")
    await OllamaWindow(services(store, resolver=resolver)).handle(request, ctx, upstream)
    assert upstream.sent == [request]
    assert resolver.asked == []
    assert ctx.notes == {}


async def test_num_ctx_is_sent_and_reported(store: DiskHistoryStore) -> None:
    """The resolved window goes upstream as `num_ctx`; notes give it, its source and the budget."""
    resolver, upstream = Resolver(Resolved(2048, "modelfile", "trained")), Upstream()
    ctx = ctx_for(store)
    messages = talk(2)
    response = await OllamaWindow(services(store, resolver=resolver)).handle(
        chat(messages), ctx, upstream
    )
    assert upstream.sent[0].body["num_ctx"] == 2048
    assert upstream.sent[0].messages == tuple(messages)
    assert ctx.notes == {
        "num-ctx": "2048",
        "num-ctx-source": "modelfile; capped-by=trained",
        "tokens-available": str(2048 * 3 // 4 - 512),
        "tokens-used": str(count_messages(messages)),
    }
    assert "context_window_optimization" not in response.json()


async def test_preflight_raises_before_calling_upstream(store: DiskHistoryStore) -> None:
    """A prompt over num_ctx x 0.75 - 512 is refused with the numbers, and nothing is sent."""
    resolver, upstream = Resolver(Resolved(2048)), Upstream()
    ctx = ctx_for(store)
    messages = talk(20)
    prevented = sample("overspill_ollama_truncations_total", model="local", stage="prevented")
    with pytest.raises(ContextWindowExceeded) as caught:
        await OllamaWindow(services(store, resolver=resolver)).handle(chat(messages), ctx, upstream)
    assert upstream.sent == []
    assert (
        sample("overspill_ollama_truncations_total", model="local", stage="prevented")
        == prevented + 1
    )
    error = caught.value
    assert (error.requested, error.limit, error.provider) == (
        count_messages(messages),
        2048,
        "ollama",
    )
    assert error.estimated
    assert "num_ctx 2048 (ps) x safety margin 0.75 - 512 reserved for the answer" in error.message
    assert error.headers() == {
        "x-overspill-requested-tokens": str(error.requested),
        "x-overspill-window": "2048",
    }
    assert ctx.notes["num-ctx"] == "2048"


async def test_with_overflow_recovery_outside_the_retry_fits(store: DiskHistoryStore) -> None:
    """[overflow_recovery, ollama_window]: the pre-flight strike is condensed, and the one call
    that reaches Ollama fits the usable budget and carries num_ctx."""
    resolver, upstream = Resolver(Resolved(2048)), Upstream()
    shared = services(store, resolver=resolver)
    pipeline = compose([OverflowRecovery(shared), OllamaWindow(shared)], upstream)
    ctx = ctx_for(store)
    await pipeline(chat(talk(20), max_tokens=16), ctx)
    assert len(upstream.sent) == 1
    assert upstream.sent[0].body["num_ctx"] == 2048
    assert count_messages(upstream.sent[0].messages) <= 1024
    assert ctx.notes["action"] == "extracted"
    assert int(ctx.notes["tokens-used"]) <= int(ctx.notes["tokens-available"])


async def test_truncation_is_detected_noted_logged_and_counted(
    store: DiskHistoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A reported prompt under 70% of the estimate is flagged as a silent truncation."""
    messages = talk(5)
    estimate = count_messages(messages)
    upstream = Upstream(prompt_tokens=int(estimate * 0.5))
    ctx = ctx_for(store)
    before = sample("overspill_ollama_truncations_total", model="local", stage="suspected")
    with caplog.at_level(logging.WARNING, "overspill.ollama_window"):
        await OllamaWindow(services(store, resolver=Resolver(Resolved(8192)))).handle(
            chat(messages), ctx, upstream
        )
    assert "dropped the oldest messages silently" in ctx.notes["warning"]
    assert ctx.notes["warning"].isascii()
    assert sample("overspill_ollama_truncations_total", model="local", stage="suspected") == (
        before + 1
    )
    assert any("silently" in r.getMessage() for r in caplog.records)


async def test_a_close_count_is_not_a_truncation(store: DiskHistoryStore) -> None:
    """The upstream's own tokenizer counting 20% fewer is not flagged."""
    messages = talk(5)
    upstream = Upstream(prompt_tokens=int(count_messages(messages) * 0.8))
    ctx = ctx_for(store)
    await OllamaWindow(services(store, resolver=Resolver(Resolved(8192)))).handle(
        chat(messages), ctx, upstream
    )
    assert "warning" not in ctx.notes


async def test_untruncated_counts_calibrate_later_estimates(store: DiskHistoryStore) -> None:
    """Ollama's own count of an uncut prompt corrects the model's later estimates."""
    messages = talk(5)
    shared = services(store, resolver=Resolver(Resolved(8192)))
    upstream = Upstream(prompt_tokens=int(count_messages(messages) * 1.25))
    layer = OllamaWindow(shared)
    await layer.handle(chat(messages), ctx_for(store), upstream)
    assert await shared.estimator.scale(shared.entry("local")) > 1.0


async def test_report_in_body_adds_the_optimization_block(store: DiskHistoryStore) -> None:
    """With `report_in_body` the JSON body gains `context_window_optimization`."""
    messages = talk(1)
    ctx = ctx_for(store, report=True)
    layer = OllamaWindow(services(store, report=True, resolver=Resolver(Resolved(4096, "config"))))
    response = await layer.handle(chat(messages), ctx, Upstream())
    body = response.json()
    assert body["choices"][0]["message"]["content"] == "ok"
    assert body["context_window_optimization"] == {
        "num_ctx": 4096,
        "num_ctx_source": "config",
        "capped_by": None,
        "tokens_available": 2560,
        "tokens_used": count_messages(messages),
        "prompt_tokens_reported": count_messages(messages),
        "truncation_suspected": False,
    }


async def test_streams_pass_through_and_their_usage_is_checked(store: DiskHistoryStore) -> None:
    """A stream's bytes are relayed unchanged; a final usage event under the estimate is counted."""
    messages = talk(5)
    ctx = ctx_for(store)
    before = sample("overspill_ollama_truncations_total", model="local", stage="suspected")
    upstream = Upstream(prompt_tokens=10, stream=True)
    response = await OllamaWindow(services(store, resolver=Resolver(Resolved(8192)))).handle(
        chat(messages, stream=True), ctx, upstream
    )
    assert response.stream is not None
    relayed = b"".join([chunk async for chunk in response.stream])
    assert relayed.startswith(sse_events(["o"])[0])
    assert relayed.endswith(b"data: [DONE]\n\n")
    assert upstream.sent[0].body["num_ctx"] == 8192
    assert sample("overspill_ollama_truncations_total", model="local", stage="suspected") == (
        before + 1
    )
    assert "warning" in ctx.notes


async def test_error_and_non_json_responses_are_left_alone(store: DiskHistoryStore) -> None:
    """A non-200 or unparsable body is returned as it came."""
    layer = OllamaWindow(services(store, report=True, resolver=Resolver(Resolved(4096))))
    for response in (
        ChatResponse(body=b"not json"),
        ChatResponse(body=orjson.dumps(completion("x")), status=201),
    ):

        async def upstream(
            request: ChatRequest, ctx: RequestContext, answer: ChatResponse = response
        ) -> ChatResponse:
            return answer

        assert await layer.handle(chat(talk(1)), ctx_for(store, report=True), upstream) is response


# --- the layer, the resolver, litellm and the fake Ollama together ------------------------------


@pytest.mark.usefixtures("no_aiohttp")
async def test_num_ctx_reaches_ollamas_options_through_litellm(store: DiskHistoryStore) -> None:
    """Through litellm's ollama_chat route the fake sees options.num_ctx from /api/ps, and no cut."""
    fake = FakeOllama([FakeModel(trained_ctx=8192, loaded_ctx=2048)], server_default=4096)
    ollama = httpx.AsyncClient(transport=httpx.ASGITransport(app=fake.app))

    async def forward(request: httpx.Request) -> httpx.Response:
        answer = await ollama.post(
            str(request.url), content=request.content, headers={"content-type": "application/json"}
        )
        return httpx.Response(
            answer.status_code, content=answer.content, headers={"content-type": "application/json"}
        )

    ctx = ctx_for(store, report=True)
    assert ctx.model is not None
    provider = LitellmProvider(ctx.model)
    windows = ModelWindows(settings_from(CONFIG.replace("REPORT", "true")), OllamaWindows(ollama))

    async def endpoint(request: ChatRequest, context: RequestContext) -> ChatResponse:
        return await provider.complete(request, context)

    with respx.mock:
        respx.post("http://ollama.test/api/chat").mock(side_effect=forward)
        layer = OllamaWindow(services(store, report=True, resolver=windows))
        response = await layer.handle(chat(talk(3), max_tokens=5), ctx, endpoint)
    await ollama.aclose()
    record = fake.records[-1]
    assert record.options["num_ctx"] == 2048
    assert record.options["num_predict"] == 5
    assert record.truncate is False
    assert record.dropped_messages == 0
    assert ctx.notes["num-ctx-source"] == "ps"
    report = response.json()["context_window_optimization"]
    assert report["prompt_tokens_reported"] == record.prompt_eval_count
    assert report["truncation_suspected"] is False


async def past_the_window(ollama_block: str) -> tuple[FakeOllama, ChatResponse | OverspillError]:
    """A 20-turn prompt sent straight through litellm (no pre-flight) to a 64-token model."""
    fake = FakeOllama([FakeModel(trained_ctx=8192, loaded_ctx=64)], server_default=64)
    config = CONFIG.replace("{report_in_body: REPORT}", ollama_block)
    provider = LitellmProvider(settings_from(config).model_list[0])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=fake.app)) as ollama:

        async def forward(request: httpx.Request) -> httpx.Response:
            answer = await ollama.post(str(request.url), content=request.content)
            return httpx.Response(answer.status_code, content=answer.content)

        with respx.mock:
            respx.post("http://ollama.test/api/chat").mock(side_effect=forward)
            try:
                outcome: ChatResponse | OverspillError = await provider.complete(
                    chat(talk(20)), RequestContext("rid", "tenant-a")
                )
            except OverspillError as exc:
                outcome = exc
    return fake, outcome


@pytest.mark.usefixtures("no_aiohttp")
async def test_a_prompt_past_num_ctx_is_a_detected_overflow_not_a_silent_cut() -> None:
    """By default Ollama is asked for `truncate: false`, so a prompt the pre-flight missed comes
    back as an overflow with both counts instead of a 200 on a cut prompt."""
    fake, outcome = await past_the_window("{}")
    assert isinstance(outcome, ContextWindowExceeded)
    assert outcome.limit == 64
    assert outcome.requested is not None
    assert outcome.requested > 64
    assert fake.records[-1].truncate is False
    assert fake.records[-1].dropped_messages == 0


@pytest.mark.usefixtures("no_aiohttp")
async def test_truncate_true_restores_ollamas_own_silent_cut() -> None:
    """`ollama.truncate: true` sends Ollama's default back: it drops the oldest messages, 200."""
    fake, outcome = await past_the_window("{truncate: true}")
    assert isinstance(outcome, ChatResponse)
    assert fake.records[-1].truncate is True
    assert fake.records[-1].dropped_messages > 0


# --- pure planning, with Hypothesis -------------------------------------------------------------


@given(st.integers(0, 100_000), st.one_of(st.none(), st.integers(0, 200_000)))
def test_truncation_needs_a_count_clearly_below_the_estimate(
    estimate: int, reported: int | None
) -> None:
    """Flagged exactly when a count was reported and it is below 70% of a positive estimate."""
    expected = reported is not None and estimate > 0 and reported < 0.7 * estimate
    assert looks_truncated(estimate, reported) is expected


async def test_a_ratio_learned_during_extraction_still_fits_the_retry(
    store: DiskHistoryStore,
) -> None:
    """Extraction calls that teach a higher token ratio (Ollama counting more than tiktoken)
    do not make the condensed retry fail the pre-flight: the stand-in is cut to fit."""
    resolver, upstream = Resolver(Resolved(2048)), Upstream()
    shared: Services

    class Teaching(Extractor):
        async def __call__(self, messages: Any, *, max_tokens: int) -> Completion:
            await shared.estimator.observe(shared.entry("local"), 1000, 1300)
            return Completion("Notes:\n- The user planned a trip. " + "detail " * 120, 100, 10)

    settings = settings_from(CONFIG.replace("REPORT", "false"))
    shared = make_services(settings, store, lambda name: Teaching(), resolver)
    pipeline = compose([OverflowRecovery(shared), OllamaWindow(shared)], upstream)
    ctx = ctx_for(store)
    await pipeline(chat(talk(20), max_tokens=16), ctx)
    assert len(upstream.sent) == 1
    assert int(ctx.notes["tokens-used"]) <= int(ctx.notes["tokens-available"])
