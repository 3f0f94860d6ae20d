"""ASGI middleware: what overspill lets a browser do, before any route runs.

- A request addressed to a name that is not this machine's, on a gateway served on loopback,
  is refused (proxy/hosts.py: a page whose DNS was rebound).
- The browser's side of `Origins` (proxy/origins.py): a listed page's preflight is answered
  and its answers carry the header that lets its script read them; another page's preflight
  is refused (its other requests are refused by the API routes, in their own shape). A
  request with no `Origin` (not a browser's) passes untouched.

Refusals are rendered by the app's one error handler (`refuse`), in the shape of the API the
path belongs to.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kernel.errors import OverspillError
from proxy import hosts, origins
from proxy.hosts import Hosts
from proxy.origins import Origins

METHODS = b"GET, POST, DELETE, OPTIONS"
MAX_AGE = b"600"
"""Seconds a browser may keep a preflight's answer."""

Refuse = Callable[[Request, Exception], Awaitable[Response]]
"""The app's handler for an OverspillError (proxy/app.py)."""


class Browsers:
    """The middleware (see the module): `hosts` and `origins` are the app's."""

    def __init__(self, app: ASGIApp, origins: Origins, hosts: Hosts, refuse: Refuse) -> None:
        self.app = app
        self.origins = origins
        self.hosts = hosts
        self.refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = origin = asked = asked_headers = None
        for name, value in scope["headers"]:
            if name == b"host":
                host = value
            elif name == b"origin":
                origin = value
            elif name == b"access-control-request-method":
                asked = value
            elif name == b"access-control-request-headers":
                asked_headers = value
        if self.hosts.checked and host is not None:
            named = host.decode("latin-1")
            if not self.hosts.allows(named):
                await self._refused(hosts.refusal(hosts.host_name(named)), scope, receive, send)
                return
        if origin is None:
            await self.app(scope, receive, send)
            return
        allowed = self.origins.allows(origin.decode("latin-1"))
        if scope["method"] == "OPTIONS" and asked is not None:
            if not allowed:
                refused = origins.refusal(origin.decode("latin-1"))
                await self._refused(refused, scope, receive, send)
                return
            await _preflight(send, origin, asked_headers)
            return
        if not allowed:  # the API routes refuse it in their own shape (proxy/endpoint.py)
            await self.app(scope, receive, send)
            return

        async def with_origin(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *_readable(origin)]
            await send(message)

        await self.app(scope, receive, with_origin)

    async def _refused(
        self, error: OverspillError, scope: Scope, receive: Receive, send: Send
    ) -> None:
        response = await self.refuse(Request(scope), error)
        await response(scope, receive, send)


def _readable(origin: bytes) -> list[tuple[bytes, bytes]]:
    """The headers that let the page at `origin` read an answer, and its headers."""
    return [
        (b"access-control-allow-origin", origin),
        (b"access-control-expose-headers", b"*"),
        (b"vary", b"origin"),
    ]


async def _preflight(send: Send, origin: bytes, headers: bytes | None) -> None:
    """The answer to an allowed page's preflight: 204 with what the page may send (the
    `headers` it asked to, else any)."""
    answer = [
        *_readable(origin),
        (b"access-control-allow-methods", METHODS),
        (b"access-control-allow-headers", headers or b"*"),
        (b"access-control-max-age", MAX_AGE),
    ]
    await send({"type": "http.response.start", "status": 204, "headers": answer})
    await send({"type": "http.response.body", "body": b""})
