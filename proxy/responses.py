"""Every response overspill renders itself: errors (JSON or an SSE event) in one place.

Each error of the tree (kernel/errors.py) knows its status, OpenAI body and extra headers;
this module turns it into bytes on the wire, with the request id and what the layers did
(`x-overspill-*`) beside it. Every body passes the process's redactor (kernel/redaction.py):
an upstream that echoes overspill's key, or a connection error naming an `api_base` with
credentials, reaches the client with the secret replaced by `***`.
"""

from __future__ import annotations

import http
import os
import re

from starlette.requests import Request
from starlette.responses import Response

from kernel import redaction
from kernel.errors import OverspillError
from kernel.types import RequestContext

_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
JSON_TYPE = "application/json"
"""The media type of every JSON answer."""


def request_id(request: Request) -> str:
    """The client's well-formed `x-request-id`, else a fresh random one."""
    given = request.headers.get("x-request-id")
    if given and _REQUEST_ID.fullmatch(given):
        return given
    return os.urandom(16).hex()


def context_headers(ctx: RequestContext) -> dict[str, str]:
    """The request id and the layers' notes as `x-overspill-*` headers."""
    headers = {"x-request-id": ctx.request_id}
    for key, value in ctx.notes.items():
        headers[f"x-overspill-{key}"] = value
    return headers


def error_response(error: OverspillError, ctx: RequestContext) -> Response:
    """An error as a JSON response (status, OpenAI body, its headers and the context's)."""
    headers = {**error.headers(), **context_headers(ctx)}
    body = redaction.redactor.redact_bytes(error.body_bytes())
    return Response(body, error.http_status(), headers, media_type=JSON_TYPE)


def sse_error_event(error: OverspillError) -> bytes:
    """An error as one SSE event (what a stream ends with after its first byte)."""
    return b"data: " + redaction.redactor.redact_bytes(error.body_bytes()) + b"\n\n"


def wire_error(error: OverspillError) -> bytes:
    """An error as a whole HTTP/1.1 response that closes the connection: for what the server's
    protocol refuses before any route sees a request (proxy/connection.py)."""
    body = redaction.redactor.redact_bytes(error.body_bytes())
    status = error.http_status()
    head = (
        f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\n"
        f"content-type: {JSON_TYPE}\r\n"
        f"content-length: {len(body)}\r\n"
        f"x-request-id: {os.urandom(16).hex()}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body
