"""`GET /metrics` for Prometheus, and the directory several workers share their counts in.

One worker serves its own registry (kernel/metrics.py, plus the process collectors). Several
workers (`overspill serve --workers N`) each write their counts to files in
`PROMETHEUS_MULTIPROC_DIR`, which `overspill serve` makes before uvicorn starts them (a fresh
private directory, removed on exit; or the operator's own, which is left alone); whichever
worker a scrape reaches merges every worker's files (prometheus-client's multiprocess mode).
prometheus-client picks its mode when it is first imported, so the variable must be set
before any worker imports it: the workers are spawned, not forked, and inherit it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    multiprocess,
)
from prometheus_client.exposition import choose_encoder
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from kernel import redaction
from kernel.errors import NotFound
from kernel.metrics import REGISTRY, flush
from proxy.admin import require_master
from proxy.endpoint import AppState

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
Encoder = Callable[[CollectorRegistry], bytes]
log = logging.getLogger("overspill")

for _collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
    REGISTRY.register(_collector)  # this process's CPU, memory, GC (single-worker mode)


def multiprocess_dir() -> str | None:
    """The shared metrics directory of this process's workers, when there are several."""
    return os.environ.get(MULTIPROC_ENV) or None


def metrics_route(state: AppState) -> Route:
    """`GET /metrics`: off when `general_settings.metrics.enabled` is false (404), behind
    the master key when `require_master_key` is true."""

    async def metrics(request: Request) -> Response:
        settings = state.system.settings.general_settings.metrics
        if not settings.enabled:
            raise NotFound("no route GET /metrics: general_settings.metrics.enabled is false")
        if settings.require_master_key:
            require_master(request, state.keys)
        encoder, content_type = choose_encoder(request.headers.get("accept", ""))
        flush()  # this worker's pending counts, now
        shared = multiprocess_dir()
        if shared is None:
            body = encoder(REGISTRY)
        else:
            body = await run_in_threadpool(merged, encoder, shared)  # every worker's files
        body = redaction.redactor.redact_bytes(body)
        return Response(body, headers={"content-type": content_type})

    return Route("/metrics", metrics, methods=["GET"])


def merged(encoder: Encoder, path: str) -> bytes:
    """Every worker's counts, merged from their files in `path`."""
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=path)  # type: ignore[no-untyped-call]
    return encoder(registry)


@contextlib.contextmanager
def shared_metrics(workers: int) -> Iterator[str | None]:
    """The directory several workers share their metrics in, for the time they run.

    An operator's `PROMETHEUS_MULTIPROC_DIR` is honoured (created if missing, never removed:
    empty it before each start). Otherwise, with more than one worker, a fresh private
    directory is made and removed on exit. One worker without the variable needs none.
    """
    given = multiprocess_dir()
    if given is not None:
        os.makedirs(given, exist_ok=True)
        yield given
        return
    if workers <= 1:
        yield None
        return
    made = tempfile.mkdtemp(prefix="overspill-metrics-")
    os.environ[MULTIPROC_ENV] = made
    try:
        yield made
    finally:
        os.environ.pop(MULTIPROC_ENV, None)
        shutil.rmtree(made, ignore_errors=True)


def worker_started() -> None:
    """At a worker's startup: flush anything counted before its event loop ran (the flush
    timer of an earlier loop died with it)."""
    flush()


def worker_stopped() -> None:
    """At a worker's shutdown: flush the last second's counts and tell the shared directory
    this worker is gone (prometheus-client's bookkeeping; uvicorn's workers end by their
    signal, so `atexit` never runs in them)."""
    flush()
    shared = multiprocess_dir()
    if shared is not None:
        multiprocess.mark_process_dead(os.getpid(), shared)  # type: ignore[no-untyped-call]
