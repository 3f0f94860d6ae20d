"""Closed by default where it matters: no gateway runs open on a network by accident.

A gateway with neither `general_settings.master_key` nor `client_keys` takes any key: whoever
can reach it spends the upstream keys in its config. On loopback (127.0.0.1, ::1, localhost)
only this machine can, and overspill serves as it always did. On any other address `overspill
serve` refuses to start and says how to set a key, unless the config sets
`general_settings.allow_unauthenticated: true` (an open gateway on purpose: behind a proxy that
authenticates, say). A `master_key: os.environ/VAR` whose variable is unset counts as no key.
A reload that would open a gateway serving a non-loopback address is refused the same way
(`HOST_ENV` carries the address `serve` bound to its workers).

LiteLLM's proxy serves open in that case; this is one place overspill is stricter than the
config it was given. On loopback a web page the user opens could still reach it through the
browser: proxy/origins.py refuses pages that are not this machine's or listed.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence

from kernel.config import Settings

HOST_ENV = "OVERSPILL_HOST"
"""The address `overspill serve` bound (read by the workers on reload)."""
MASTER_KEY_UNSET = "general_settings.master_key: environment variable "


def is_loopback(host: str) -> bool:
    """Whether only this machine can reach `host` (an address or `localhost`)."""
    name = host.strip().strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False  # a host name: assume the network can reach it


def open_gateway_refusal(settings: Settings, host: str, warnings: Sequence[str] = ()) -> str | None:
    """Why serving `settings` on `host` is refused (None: it is closed, on loopback, or open
    on purpose). `warnings` are the config's load warnings (they name an unset variable)."""
    general = settings.general_settings
    if general.master_key is not None or general.client_keys or general.allow_unauthenticated:
        return None
    if is_loopback(host):
        return None
    unset = next(
        (
            w[len(MASTER_KEY_UNSET) :].split(" ", 1)[0]
            for w in warnings
            if w.startswith(MASTER_KEY_UNSET)
        ),
        None,
    )
    why = (
        f"general_settings.master_key names the environment variable {unset}, which is unset"
        if unset
        else "general_settings has no master_key and no client_keys"
    )
    return (
        f"refusing to serve on {host} without authentication: {why}, so anyone who can reach "
        f"{host} could use the upstream keys in this config. Set a key: "
        "`master_key: os.environ/OVERSPILL_MASTER_KEY` under general_settings with "
        "OVERSPILL_MASTER_KEY exported (or client_keys for each app); or serve on 127.0.0.1; "
        "or set general_settings.allow_unauthenticated: true to serve open on purpose"
    )


def address_problem(host: str, port: int) -> str | None:
    """Why `host` is no address to serve on (a name that does not resolve: uvicorn's own
    message, "[Errno -2] Name or service not known", names neither the host nor the
    setting), or None."""
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.args[-1] if isinstance(exc, socket.gaierror) else str(exc)
        return (
            f"cannot serve on {host!r}: {reason}; give --host or general_settings.host an "
            "address of this machine (127.0.0.1 for this machine only, 0.0.0.0 for every "
            "interface)"
        )
    return None
