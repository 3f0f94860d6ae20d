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
API route, in that API's shape (proxy/endpoint.py). For the pages it serves, proxy/browsers.py
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

from kernel.errors import ForbiddenOrigin
from proxy.exposure import is_loopback

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
