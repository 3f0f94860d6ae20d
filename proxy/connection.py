"""uvicorn's HTTP/1.1 protocol (httptools) with overspill's connection limits and JSON refusals.

uvicorn parses the request line and headers before any ASGI app sees a request, answers what
it cannot parse with a plain-text 400, accepts headers of any size, and times out only an idle
connection after a response. This subclass, per connection:

- bounds the request line and headers to `max_header_bytes` (431);
- gives a request `client_header_timeout` from its first byte to its last header, and
  `client_body_timeout` from there to its body's end (408, then the connection is closed);
  time the server spends not reading (back-pressure, a queued pipelined request) is not counted;
- closes a new connection that sends nothing for `keep_alive_timeout` (uvicorn does so only
  between requests);
- answers every refusal in the OpenAI error shape (proxy/responses.py::wire_error).

The limits are proxy/limits.py's; only the wiring to this server is here.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any, Literal

import httptools
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from kernel.errors import (
    HeadersTooLarge,
    InvalidHttpRequest,
    OverspillError,
    RequestTimeout,
)
from proxy.limits import ConnectionLimits
from proxy.responses import wire_error

log = logging.getLogger("overspill.connection")

Phase = Literal["idle", "head", "body"]


class LimitedHttpProtocol(HttpToolsProtocol):
    """One client connection, bounded (see the module's docstring)."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits = _limits()
        self.timeout_keep_alive = self.limits.keep_alive_seconds
        self.phase: Phase = "idle"
        self.received = 0  # bytes read since the head started (while it is incomplete)
        self.deadline: asyncio.TimerHandle | None = None
        self.refusal: OverspillError | None = None  # raised from a parser callback
        self.deferred: OverspillError | None = None  # answered after the earlier responses

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Serve the connection; close it if its first request does not start in time."""
        super().connection_made(transport)
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )

    def connection_lost(self, exc: Exception | None) -> None:
        """The connection is gone: no deadline is left behind."""
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """Feed the parser; a head too large or a request that is not HTTP is refused."""
        self._unset_keepalive_if_required()
        if self.deferred is not None:
            return  # refused already: what follows is not read
        if self.phase == "idle":
            self._start_head()
        if self.phase == "head":
            self.received += len(data)  # at least the head's bytes (the parser holds them)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._no_upgrade()
        except httptools.HttpParserError as exc:
            self._refuse(self.refusal or InvalidHttpRequest(_parser_problem(exc)))
            return
        # A deadline is armed only for a request still incomplete after a read (most arrive
        # whole in one), from then on until it is complete.
        if self.phase == "head":
            if self.received > self.limits.max_header_bytes:
                self._refuse(self._too_large())
            elif self.deadline is None:
                self._arm(self.limits.header_seconds, self._head_late)
        elif self.phase == "body" and self.deadline is None:
            self._arm(self.limits.body_seconds, self._body_late)

    def send_400_response(self, msg: str) -> None:
        """Whatever uvicorn itself refuses is answered in the OpenAI error shape too."""
        self._refuse(InvalidHttpRequest(f"invalid HTTP request: {msg}"))

    # parser callbacks (called from feed_data)

    def on_headers_complete(self) -> None:
        """The head is in: measured exactly when the bytes read might exceed the bound, then
        the body's clock starts (armed if the body is not in this read)."""
        if self.received > self.limits.max_header_bytes or self.phase != "head":
            size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
            if size > self.limits.max_header_bytes:
                self.refusal = self._too_large()
                raise self.refusal  # the parser stops; data_received answers it
        super().on_headers_complete()
        self.phase = "body"
        self._disarm()

    def on_message_complete(self) -> None:
        """The whole request is in: no deadline until the next one starts."""
        self.phase = "idle"
        self._disarm()
        super().on_message_complete()

    # the limits

    def _start_head(self) -> None:
        self.phase = "head"
        self.received = 0

    def _too_large(self) -> HeadersTooLarge:
        return HeadersTooLarge(
            f"the request line and headers are over {self.limits.max_header_bytes} bytes "
            "(general_settings.max_header_bytes): send fewer or shorter headers"
        )

    def _head_late(self) -> None:
        self._late(
            f"the request line and headers did not arrive within "
            f"{self.limits.header_seconds:g} s (general_settings.client_header_timeout)"
        )

    def _body_late(self) -> None:
        self._late(
            f"the request body did not arrive within {self.limits.body_seconds:g} s of its "
            "headers (general_settings.client_body_timeout)"
        )

    def _late(self, what: str) -> None:
        """A deadline passed: refuse, unless it is overspill that is not reading."""
        self.deadline = None
        cycle = self.cycle
        busy = cycle is not None and cycle.response_started and not cycle.response_complete
        if self.flow.read_paused or (self.phase == "head" and busy):
            self._arm(1.0, self._head_late if self.phase == "head" else self._body_late)
            return
        self._refuse(RequestTimeout(f"{what}: send the request faster"))

    def _refuse(self, error: OverspillError) -> None:
        """Answer the error in its turn and close the connection.

        A refused head is answered after the responses to the requests before it (reading
        stops meanwhile); a refused body is answered unless the app already started answering
        it, else (or behind a queued pipelined request) the connection is only closed."""
        refused_body = self.phase == "body"
        fields = {"client": _client(self.client), "status": error.http_status(),
                  "error": error.error_code(), "error_message": error.message}  # fmt: skip
        log.info("request refused", extra=fields)
        self._disarm()
        self.phase = "idle"
        if self.transport.is_closing():
            return
        cycle = self.cycle
        earlier_pending = cycle is not None and not cycle.response_complete
        if not refused_body and earlier_pending:
            self.deferred = error  # written by on_response_complete after the last answer
            self.flow.pause_reading()
            return
        if not self.pipeline and (not refused_body or not cycle or not cycle.response_started):
            self.transport.write(wire_error(error))
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True  # the app's task sees a disconnect and writes nothing
            cycle.message_event.set()
        self.transport.close()

    def on_response_complete(self) -> None:
        """A response is out: the next pipelined request starts, or a deferred refusal goes."""
        super().on_response_complete()
        if self.deferred is not None and not self.pipeline and not self.transport.is_closing():
            self.transport.write(wire_error(self.deferred))
            self.transport.close()

    def _no_upgrade(self) -> None:
        """overspill speaks HTTP/1.1 only: a request asking to upgrade is answered as HTTP/1.1,
        on a connection that is then closed (the bytes after its head are not HTTP/1.1)."""
        if self.cycle is not None:
            self.cycle.keep_alive = False

    def _arm(self, seconds: float, late: Callable[[], None]) -> None:
        self._disarm()
        self.deadline = self.loop.call_later(seconds, late)

    def _disarm(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None


def server_options(limits: ConnectionLimits) -> dict[str, Any]:
    """uvicorn's settings for `limits`, exported for the workers: this protocol, HTTP/1.1
    only (overspill has no WebSocket route), and uvicorn's own bounds set to the same values."""
    limits.export()
    return {
        "http": LimitedHttpProtocol,
        "ws": "none",
        "timeout_keep_alive": limits.keep_alive_seconds,
        "h11_max_incomplete_event_size": limits.max_header_bytes,
    }


@functools.cache
def _limits() -> ConnectionLimits:
    """The limits `serve` exported, read once per worker."""
    return ConnectionLimits.exported()


def _parser_problem(exc: httptools.HttpParserError) -> str:
    """The parser's own words, when it gave any."""
    detail = str(exc.__context__ or exc) or type(exc).__name__
    return f"invalid HTTP request: {detail}"


def _client(client: tuple[str, int] | None) -> str | None:
    return f"{client[0]}:{client[1]}" if client else None
