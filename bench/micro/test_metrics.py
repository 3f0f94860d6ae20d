"""What overspill's metrics cost a request that needs no help, each part on its own.

- shell: a request's end in proxy/endpoint.py (its count and latency, its added time, the
  `span is None` check);
- router: one upstream call's metric lines (two clock reads, `upstream_seconds`, its count
  and latency), and a call through `Router.complete` against a provider that answers at once,
  beside the same provider called straight (no measuring);
- context: a RequestContext built (twice per request);
- for scale: a request's lines and a flush of the tallies (which happens once a second per
  worker, spread over its requests).

With `PROMETHEUS_MULTIPROC_DIR` set to an empty folder, the same figures in the mode
`overspill serve --workers N` uses (every count written to an mmap'd file).
"""

from __future__ import annotations

from time import perf_counter

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from bench.micro.conftest import Timed
from kernel import metrics, tracing
from kernel.types import ChatRequest, ChatResponse, RequestContext
from providers.router import Router

ANSWER = ChatResponse(body=b"{}")
REQUEST = ChatRequest("local", ({"role": "user", "content": "hi"},), False, {})


class Instant:
    """A provider that answers at once."""

    name = "openai"

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        return ANSWER

    async def aclose(self) -> None:
        pass


def shell_end(ctx: RequestContext) -> None:
    """proxy/endpoint.py's metric lines at a request's end (non-stream: its head too)."""
    started = perf_counter()
    seconds = perf_counter() - started
    model = ctx.model.model_name if ctx.model is not None else metrics.NO_MODEL
    metrics.request_done(model, False, 200, seconds)
    metrics.request_head(model, False, seconds - ctx.upstream_seconds)
    if ctx.span is not None:
        raise AssertionError("tracing is off")


def router_lines(ctx: RequestContext) -> None:
    """providers/router.py's metric lines around one call."""
    started = perf_counter()
    seconds = perf_counter() - started
    ctx.upstream_seconds += seconds
    metrics.upstream_called("openai", "local", seconds)


def with_flush(ctx: RequestContext) -> None:
    shell_end(ctx)
    router_lines(ctx)
    metrics.flush()


PARTS = {
    "shell: request end": shell_end,
    "router: one call's lines": router_lines,
    "context: RequestContext(...)": lambda ctx: RequestContext(request_id="r", tenant="t"),
    "for scale: lines and a flush": with_flush,
}


@pytest.mark.parametrize("part", list(PARTS))
def test_part(benchmark: BenchmarkFixture, part: str) -> None:
    """One part's calls."""
    assert tracing.tracer is None
    benchmark.group = "metrics: parts"
    ctx = RequestContext(request_id="r", tenant="t")
    benchmark(PARTS[part], ctx)


@pytest.mark.parametrize("how", ["provider straight", "Router.complete, measured"])
def test_routed_call(timed: Timed, how: str) -> None:
    """One upstream call, with the router's measuring or without."""
    ctx = RequestContext(request_id="r", tenant="t")
    router = Router({"local": [Instant()]})
    provider = router.deployments["local"][0]
    if how == "provider straight":
        timed("metrics: a routed call", lambda: provider.complete(REQUEST, ctx), times=100)
    else:
        timed("metrics: a routed call", lambda: router.complete(REQUEST, ctx), times=100)
