"""Several deployments of one model: turns, failover before the first byte, no useless retries."""

from __future__ import annotations

import pytest

from kernel.errors import ContextWindowExceeded, ModelNotFound, UpstreamError, UpstreamRateLimited
from kernel.services import Window
from kernel.spending import Spend
from kernel.types import ChatRequest, RequestContext
from providers.fake import ScriptedProvider, json_response
from providers.ollama import OllamaWindows
from providers.router import Router
from providers.windows import ModelWindows
from tests.conftest import settings_from

USER = {"role": "user", "content": "hi"}
REQUEST = ChatRequest("m", (USER,), False, {"model": "m", "messages": [USER]})


async def test_deployments_take_turns() -> None:
    """Requests are spread round robin over a model's deployments."""
    a, b = ScriptedProvider([json_response("a")]), ScriptedProvider([json_response("b")])
    router = Router({"m": [a, b]})
    for _ in range(4):
        await router.complete(REQUEST, RequestContext("r", "t"))
    assert (len(a.requests), len(b.requests)) == (2, 2)


@pytest.mark.parametrize("failure", [UpstreamError("down"), UpstreamRateLimited("slow")])
async def test_a_failed_deployment_is_retried_on_the_next(failure: Exception) -> None:
    """Unreachable or rate-limited deployments fail over to another, noted in the context."""
    bad, good = ScriptedProvider([failure]), ScriptedProvider([json_response("ok")])
    ctx = RequestContext("r", "t")
    response = await Router({"m": [bad, good]}).complete(REQUEST, ctx)
    assert response.json()["choices"][0]["message"]["content"] == "ok"
    assert ctx.notes == {"failover": "1"}


async def test_overflow_is_not_retried_elsewhere() -> None:
    """A context-window overflow is raised at once: another deployment would repeat it."""
    first = ScriptedProvider([ContextWindowExceeded("too long")])
    second = ScriptedProvider([json_response("never")])
    with pytest.raises(ContextWindowExceeded):
        await Router({"m": [first, second]}).complete(REQUEST, RequestContext("r", "t"))
    assert second.requests == []


async def test_all_deployments_failing_raises_the_last_error() -> None:
    """When every deployment fails, the last failure is what the client sees."""
    router = Router(
        {"m": [ScriptedProvider([UpstreamError("one")]), ScriptedProvider([UpstreamError("two")])]}
    )
    with pytest.raises(UpstreamError, match="two"):
        await router.complete(REQUEST, RequestContext("r", "t"))


async def test_unknown_model() -> None:
    """A model with no deployment is model_not_found."""
    with pytest.raises(ModelNotFound):
        await Router({}).complete(REQUEST, RequestContext("r", "t"))


async def test_a_name_without_a_group_asks_the_expand_callback() -> None:
    """A name no group spells out (a wildcard serves it) gets its group from the callback,
    once; the callback's empty answer is model_not_found."""
    built = ScriptedProvider([json_response("a"), json_response("b")])
    asked: list[str] = []

    def expand(name: str) -> list[ScriptedProvider]:
        asked.append(name)
        if name != "m":
            return []
        router.add(name, [built])
        return [built]

    router = Router({})
    router.expand_with(expand)
    for _ in range(2):
        await router.complete(REQUEST, RequestContext("r", "t"))
    assert (asked, len(built.requests)) == (["m"], 2)
    other = ChatRequest("x", (USER,), False, {"model": "x", "messages": [USER]})
    with pytest.raises(ModelNotFound):
        await router.complete(other, RequestContext("r", "t"))


async def test_an_alias_shares_its_targets_deployments_and_closes_them_once() -> None:
    """A group added under a second name is the same providers; closing closes each once."""
    provider = ScriptedProvider([json_response("a")])
    router = Router({"m": [provider]})
    router.add("alias", router.deployments["m"])
    alias = ChatRequest("alias", (USER,), False, {"model": "alias", "messages": [USER]})
    await router.complete(alias, RequestContext("r", "t"))
    assert len(provider.requests) == 1
    await router.aclose()


async def test_an_overflow_that_states_the_window_teaches_it() -> None:
    """A model whose window nobody knew: the first overflow's numbers are its window from then
    on; a larger stated window never raises a known one; Ollama's is the num_ctx it is sent."""
    settings = settings_from(
        "model_list:\n"
        "  - model_name: open\n    litellm_params: {model: openai/unknown-x, api_base: 'http://h/v1'}\n"
        "  - model_name: local\n    litellm_params: {model: ollama_chat/llama3.2}\n"
    )
    windows = ModelWindows(settings, OllamaWindows())
    overflow = ContextWindowExceeded("too long", requested=9000, limit=8192, provider="openai")
    router = Router({"open": [ScriptedProvider([overflow])]}, learn=windows.learn)
    open_entry = settings.model_list[0]
    assert await windows.of(open_entry) is None
    request = ChatRequest("open", (USER,), False, {"model": "open", "messages": [USER]})
    with pytest.raises(ContextWindowExceeded):
        await router.complete(request, RequestContext("r", "t"))
    assert await windows.of(open_entry) == Window(8192, "overflow")
    windows.learn("open", 16384)
    assert await windows.of(open_entry) == Window(8192, "overflow")
    windows.learn("local", 100)
    assert "local" not in windows._learned


async def test_every_call_counts_in_the_requests_spend() -> None:
    """The router counts each upstream call, failovers included, into the request's Spend."""
    bad, good = ScriptedProvider([UpstreamError("down")]), ScriptedProvider([json_response("ok")])
    ctx = RequestContext("r", "t")
    ctx.spend = Spend("t", ctx.notes)
    await Router({"m": [bad, good]}).complete(REQUEST, ctx)
    assert ctx.spend.upstream_calls == 2
    assert ctx.notes["upstream-calls"] == "2"
