"""Which web pages may call overspill from a browser (`general_settings.allowed_origins`).

A browser sends a page's requests to any address, overspill's on loopback included, and a
"simple" one (a POST whose body is `text/plain`, as `fetch(url, {method: "POST", body})`
sends it) goes out without asking first; the page cannot read the answer, but the call is
made. On a gateway with no key (the sidecar default, on loopback) any site the user visits
could so spend the upstream keys in the config. Every request from a page carries the page's
`Origin`; clients that are not browsers (the SDKs, the agents, curl) send none.

So a request with an `Origin` is served only when the page is this machine's (`localhost`,
`127.0.0.0/8`, `[::1]`, any scheme and port: a web app in development) or listed in
`allowed_origins` (`*`: any); any other is refused with a 403 naming the setting, on every
API route, in that API's shape (proxy/endpoint.py). For the pages it serves, `CrossOrigin`
answers the browser's preflight (`OPTIONS`, which a JSON body or an `Authorization` header
makes the browser send first) and lets the page read the answer (`Access-Control-Allow-
Origin`); for other pages it refuses the preflight, so their requests are never sent. No
cookies are involved: keys travel in headers, so credentials are never allowed.

LiteLLM's proxy allows every origin by default; overspill is stricter here, as it is about
serving open on a network (proxy/exposure.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kernel.errors import ForbiddenOrigin
from proxy.exposure import is_loopback

METHODS = b"GET, POST, DELETE, OPTIONS"
MAX_AGE = b"600"
"""Seconds a browser may keep a preflight's answer."""
DEFAULT_PORTS = {"http": 80, "https": 443}


def _normal(origin: str) -> str:
    """An origin as compared: scheme and host lower-cased, a default port and a trailing slash
    dropped (a browser's `Origin` has neither)."""
    parts = urlsplit(origin.strip())
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:
        return origin
    if ":" in host:
        host = f"[{host}]"
    shown = f"{scheme}://{host}"
    return shown if port is None or DEFAULT_PORTS.get(scheme) == port else f"{shown}:{port}"


class Origins:
    """The pages whose requests overspill serves (`allows`)."""

    def __init__(self, listed: Sequence[str] = ()) -> None:
        self.any = "*" in listed
        self.listed = frozenset(_normal(entry) for entry in listed if entry != "*")

    def allows(self, origin: str) -> bool:
        """Whether a request from a page at `origin` (its `Origin` header) is served."""
        return (
            self.any
            or _normal(origin) in self.listed
            or is_loopback(urlsplit(origin).hostname or "")
        )

    def check(self, origin: str | None) -> None:
        """Raises ForbiddenOrigin for a page `allows` does not allow (None: not a browser)."""
        if origin is not None and not self.allows(origin):
            raise refusal(origin)


def refusal(origin: str) -> ForbiddenOrigin:
    """The 403 for a request from a page at `origin` that is not allowed."""
    return ForbiddenOrigin(
        f"requests from web pages at {origin[:200]!r} are refused: a page a browser opens "
        "could otherwise call overspill, and spend its upstream keys, without its user "
        "knowing. To let a browser app at that address call overspill, list it in "
        "general_settings.allowed_origins"
    )


class CrossOrigin:
    """ASGI middleware: the browser's side of `Origins` (preflights, and the header that lets
    an allowed page read an answer). A request with no `Origin` passes untouched."""

    def __init__(self, app: ASGIApp, origins: Origins) -> None:
        self.app = app
        self.origins = origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        origin = asked = asked_headers = None
        for name, value in scope["headers"]:
            if name == b"origin":
                origin = value
            elif name == b"access-control-request-method":
                asked = value
            elif name == b"access-control-request-headers":
                asked_headers = value
        if origin is None:
            await self.app(scope, receive, send)
            return
        allowed = self.origins.allows(origin.decode("latin-1"))
        if scope["method"] == "OPTIONS" and asked is not None:
            await _preflight(send, origin, asked_headers, allowed)
            return
        if not allowed:  # the API routes refuse it in their own shape (proxy/endpoint.py)
            await self.app(scope, receive, send)
            return

        async def with_origin(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *_readable(origin)]
            await send(message)

        await self.app(scope, receive, with_origin)


def _readable(origin: bytes) -> list[tuple[bytes, bytes]]:
    """The headers that let the page at `origin` read an answer, and its headers."""
    return [
        (b"access-control-allow-origin", origin),
        (b"access-control-expose-headers", b"*"),
        (b"vary", b"origin"),
    ]


async def _preflight(send: Send, origin: bytes, headers: bytes | None, allowed: bool) -> None:
    """The answer to a browser's preflight: 204 with what the page may send (the `headers`
    it asked to, else any), or the 403 (the browser then sends nothing)."""
    if allowed:
        answer = [
            *_readable(origin),
            (b"access-control-allow-methods", METHODS),
            (b"access-control-allow-headers", headers or b"*"),
            (b"access-control-max-age", MAX_AGE),
        ]
        await send({"type": "http.response.start", "status": 204, "headers": answer})
        await send({"type": "http.response.body", "body": b""})
        return
    refused = refusal(origin.decode("latin-1"))
    body = refused.body_bytes()
    answer = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": refused.http_status(), "headers": answer})
    await send({"type": "http.response.body", "body": body})
