"""The command line's calls to a running overspill (`conversations`, `usage` and `ollama
refresh` with `--url`, and `health`): one request, its JSON answer, or an error that says what
went wrong.

Each command used to read the answer as JSON whatever came back, so an address that is not
overspill's (another server's HTML 404, a reverse proxy's 502 page) ended in a traceback, and
a refused connection printed as a bare ``[Errno 111] Connection refused``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import httpx


class AdminCallError(Exception):
    """A call to a running overspill that gave no answer to use; its text says why."""


def call(
    method: str,
    url: str,
    path: str,
    key: str | None,
    params: Mapping[str, str] | None = None,
    *,
    answers: Collection[int] = (),
    seconds: float = 5.0,
) -> dict[str, Any]:
    """The JSON object `method url+path` answers; AdminCallError when the server cannot be
    reached (within `seconds`), answers an error (overspill's own message when it sent one;
    a status in `answers` is an answer, as `/health`'s 503), or answers something that is not
    a JSON object (not overspill's address)."""
    headers = {"authorization": f"Bearer {key}"} if key else {}
    try:
        response = httpx.request(
            method,
            url.rstrip("/") + path,
            params=dict(params or {}),
            headers=headers,
            timeout=seconds,
        )
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise AdminCallError(f"cannot reach {url}: {exc}") from None
    try:
        body = response.json()
    except ValueError:
        body = None
    status = f"{response.status_code} {response.reason_phrase}".rstrip()
    if response.status_code >= 400 and response.status_code not in answers:
        error = body.get("error") if isinstance(body, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        if isinstance(message, str):
            raise AdminCallError(f"{url} answered {status}: {message}")
        raise AdminCallError(f"{url} answered {status}, not overspill's error: {_NOT_OURS}")
    if not isinstance(body, dict):
        raise AdminCallError(f"{url} answered {status} with no JSON object: {_NOT_OURS}")
    return body


_NOT_OURS = "is it the address overspill serves on (its host and port)?"
