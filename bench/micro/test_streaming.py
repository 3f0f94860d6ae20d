"""Why SSE uses its own response class: overspill's EventStream against Starlette's
StreamingResponse, the same overspill app answering the gateway bench's streaming bodies.

Starlette's class starts an anyio task group per response to watch for the client leaving;
overspill's `EventStream` (proxy/endpoint.py) has one small disconnect watcher. Each round is 20
requests; within a body's group, StreamingResponse's row over EventStream's is the ratio.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping

import pytest
from starlette.responses import StreamingResponse

from bench.micro.apps import BODIES, ASGIApp, call, overspill_app
from bench.micro.conftest import Timed
from kernel.store import DiskHistoryStore
from proxy import endpoint as chat


class StarletteStream(StreamingResponse):
    """The same relay through Starlette's StreamingResponse."""

    def __init__(
        self,
        chunks: AsyncIterator[bytes],
        watch: chat.DisconnectWatch,
        status_code: int,
        headers: Mapping[str, str],
    ) -> None:
        watch.stop()  # Starlette's own task group watches for the disconnect from here on
        super().__init__(chunks, status_code, headers, media_type="text/event-stream")


CLASSES = {"EventStream": chat.EventStream, "StreamingResponse": StarletteStream}


@pytest.fixture(scope="module")
def app(store: DiskHistoryStore) -> ASGIApp:
    return overspill_app(store)


@pytest.fixture
def response_class(request: pytest.FixtureRequest) -> Iterator[str]:
    """proxy.endpoint's response class swapped for the benchmark, put back after."""
    name: str = request.param
    original = chat.EventStream
    chat.EventStream = CLASSES[name]  # type: ignore[assignment, misc]
    yield name
    chat.EventStream = original  # type: ignore[misc]


@pytest.mark.parametrize("response_class", list(CLASSES), indirect=True)
@pytest.mark.parametrize("body", [name for name in BODIES if name.startswith("sse")])
def test_stream(timed: Timed, app: ASGIApp, body: str, response_class: str) -> None:
    """One streamed request through overspill, the events read whole."""
    data = BODIES[body]
    timed(f"streaming: {body}", lambda: call(app, data), times=20)
