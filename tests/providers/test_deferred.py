"""A provider built on its first request (how litellm-path models avoid litellm's import)."""

from __future__ import annotations

import asyncio
import gc

import pytest

from kernel.types import ChatRequest, ChatResponse, Provider, RequestContext
from providers import deferred
from providers.deferred import DeferredProvider
from providers.fake import ScriptedProvider, json_response

CTX = RequestContext("r", "t")


def _request() -> ChatRequest:
    return ChatRequest(
        model="m", messages=({"role": "user", "content": "hi"},), stream=False, body={}
    )


class _Closing(ScriptedProvider):
    """A scripted provider that records being closed."""

    closed = False

    async def aclose(self) -> None:
        """Remember the call."""
        self.closed = True


async def test_concurrent_first_requests_build_the_provider_once() -> None:
    """Requests arriving together before the first build share one built provider."""
    built: list[Provider] = []

    def build() -> Provider:
        built.append(ScriptedProvider([json_response("a"), json_response("b")]))
        return built[-1]

    deferred = DeferredProvider("p", "json", build)
    assert not deferred.built
    answers = await asyncio.gather(
        deferred.complete(_request(), CTX), deferred.complete(_request(), CTX)
    )
    assert len(built) == 1
    assert deferred.built
    assert sorted(a.body or b"" for a in answers) == sorted(
        [json_response("a").body or b"", json_response("b").body or b""]
    )


async def test_closing_an_unused_provider_builds_nothing() -> None:
    """aclose before any request does not import or build; after one, it closes the provider."""
    made: list[_Closing] = []

    def build() -> Provider:
        made.append(_Closing([json_response("x")]))
        return made[-1]

    unused = DeferredProvider("p", "no.such.module", build)
    await unused.aclose()
    assert made == []
    used = DeferredProvider("p", "json", build)
    answer: ChatResponse = await used.complete(_request(), CTX)
    assert answer.body == json_response("x").body
    await used.aclose()
    assert made[0].closed


async def test_the_serving_process_freezes_what_the_first_request_imports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With FREEZE_AFTER_IMPORT (set by `overspill serve`), the import is followed by
    gc.freeze(); without it (tests, library use), nothing is frozen."""
    frozen: list[bool] = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))
    monkeypatch.setattr(deferred, "FREEZE_AFTER_IMPORT", False)  # as an in-process serve leaves it

    def build() -> Provider:
        return ScriptedProvider([json_response("a"), json_response("b")])

    await DeferredProvider("p", "json", build).complete(_request(), CTX)
    assert frozen == []
    monkeypatch.setattr(deferred, "FREEZE_AFTER_IMPORT", True)
    await DeferredProvider("p", "json", build).complete(_request(), CTX)
    assert frozen == [True]
