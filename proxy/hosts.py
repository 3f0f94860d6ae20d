"""The names a request may be addressed to on loopback (`general_settings.allowed_hosts`).

DNS rebinding: a site the user opens re-resolves its own name to 127.0.0.1, and its page's
scripts then reach the overspill on this machine as the page's own origin. Such a request is
same-origin to the browser, so a `GET` carries no `Origin` (proxy/origins.py sees nothing)
and the page reads the answer: the models, readiness and metrics of a keyless gateway. What
tells it apart is the name it is addressed to, its `Host`: the site's.

So on a gateway served on loopback (the sidecar default) a request is served only when its
`Host` names this machine: an IP address (a rebound page always uses a name), `localhost`
and `*.localhost`, a name without a dot (the machine's own, an `/etc/hosts` alias: a public
site's name has one), `*.local` (mDNS) and `*.internal` (reserved for private networks), or a
name listed in `allowed_hosts` (a reverse proxy on this machine that forwards the public
name). Others get a 403 naming the setting; a request with no `Host` (HTTP/1.0) is served.
Off loopback nothing is checked: a gateway there needs a key (proxy/exposure.py), which a
rebound page does not have. Ollama refuses the same requests by a stricter list (its own
host name alone among dotless names).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from functools import lru_cache

from kernel.errors import ForbiddenHost
from proxy.exposure import is_loopback

PRIVATE_SUFFIXES = (".localhost", ".local", ".internal")
"""Names no public site can be given: a page elsewhere cannot be served under them."""


def host_name(header: str) -> str:
    """The name a `Host` header carries: lower case, without port, brackets or a final dot."""
    value = header.strip().lower()
    if value.startswith("["):  # [::1]:4000
        return value[1:].partition("]")[0]
    if value.count(":") == 1:
        value = value.partition(":")[0]
    return value.rstrip(".")


@lru_cache(maxsize=1024)
def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class Hosts:
    """The names a request's `Host` may carry (`allows`); any, unless served on loopback."""

    def __init__(self, listed: Sequence[str] = (), served_on: str | None = None) -> None:
        self.checked = served_on is not None and is_loopback(served_on) and "*" not in listed
        """Whether the `Host` is checked at all: served on loopback, `*` not listed."""
        names = {host_name(entry) for entry in listed if not entry.startswith(".")}
        self.names = frozenset({"", "localhost", socket.gethostname().lower(), *names})
        self.domains = tuple(entry.lower().rstrip(".") for entry in listed if entry[:1] == ".")

    def allows(self, header: str) -> bool:
        """Whether a request addressed to `header` (its `Host`) is served."""
        if not self.checked:
            return True
        name = host_name(header)
        return (
            name in self.names
            or "." not in name
            or name.endswith(PRIVATE_SUFFIXES)
            or any(name.endswith(domain) or name == domain[1:] for domain in self.domains)
            or _is_address(name)
        )


def refusal(name: str) -> ForbiddenHost:
    """The 403 for a request addressed to `name` on loopback."""
    return ForbiddenHost(
        f"requests addressed to {name[:200]!r} are refused: overspill serves on loopback, "
        "where requests name this machine (localhost, an IP address, its host name), and "
        "another name is how a web page whose DNS was rebound to this machine reaches it. If a "
        "reverse proxy on this machine forwards requests with that Host, list the name in "
        "general_settings.allowed_hosts"
    )
