"""What overspill's metrics cost a request that needs no help, in µs of CPU (timeit).

Times the exact calls such a request makes, each part on its own:

- shell: the request's end in proxy/endpoint.py (its count and latency, its added time, the
  `span is None` check), measured as `_log_request`'s metric lines;
- router: one upstream call measured (two clock reads, `upstream_seconds`, its count and
  latency), and the same call through `Router.complete` against a provider that answers at
  once, with and without the measuring (what main did: `await provider.complete`);
- context: the two RequestContext fields added (built twice per request).

    .venv/bin/python scripts/bench_metrics.py [--number 200000] [--multiprocess]

`--multiprocess` reruns it with PROMETHEUS_MULTIPROC_DIR set to a temporary directory (the
mode `overspill serve --workers N` uses: every count is written to an mmap'd file).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import timeit
from collections.abc import Callable
from time import perf_counter

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


async def calls(router: Router, ctx: RequestContext, number: int, measured: bool) -> float:
    """µs per call: through Router.complete (measured) or straight to the provider (main)."""
    provider = router.deployments["local"][0]
    started = perf_counter()
    if measured:
        for _ in range(number):
            await router.complete(REQUEST, ctx)
    else:
        for _ in range(number):
            await provider.complete(REQUEST, ctx)
    return (perf_counter() - started) / number * 1e6


def per_call(statement: Callable[[], object], number: int) -> float:
    """Best of five runs, µs per call."""
    return min(timeit.repeat(statement, number=number, repeat=5)) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=200_000)
    parser.add_argument("--multiprocess", action="store_true")
    args = parser.parse_args()
    if args.multiprocess and "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
        with tempfile.TemporaryDirectory() as shared:
            env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": shared}
            argv = [sys.executable, __file__, "--number", str(args.number)]
            raise SystemExit(subprocess.run(argv, env=env, check=False).returncode)
    asyncio.run(measure(args.number))


async def measure(number: int) -> None:
    """Everything inside a running event loop, as in a worker (tallies flush on a timer)."""
    assert tracing.tracer is None
    mode = "multiprocess (mmap files)" if "PROMETHEUS_MULTIPROC_DIR" in os.environ else "in memory"
    ctx = RequestContext(request_id="r", tenant="t")
    shell = per_call(lambda: shell_end(ctx), number)
    lines = per_call(lambda: router_lines(ctx), number)
    context = per_call(lambda: RequestContext(request_id="r", tenant="t"), number)
    router = Router({"local": [Instant()]})
    direct = min([await calls(router, ctx, number, False) for _ in range(5)])
    routed = min([await calls(router, ctx, number, True) for _ in range(5)])

    def with_flush() -> None:
        shell_end(ctx)
        router_lines(ctx)
        metrics.flush()

    flushing = per_call(with_flush, 10_000)
    print(f"metrics {mode}, best of 5 x {number} calls, µs per call")
    print(f"  shell: request end (count, latency, added time)  {shell:6.2f}")
    print(f"  router: one call's metric lines                   {lines:6.2f}")
    print(f"  router: provider.complete straight (main)         {direct:6.2f}")
    print(f"  router: Router.complete, measured (this branch)   {routed:6.2f}")
    print(f"  RequestContext(...) with the two new fields       {context:6.2f}")
    print(f"  per request (shell + one routed call - direct)    {shell + routed - direct:6.2f}")
    print(f"  for scale: a request and a flush per request      {flushing:6.2f}")
    print("  (tallies flush once a second per worker: its cost is spread over its requests)")


if __name__ == "__main__":
    main()
