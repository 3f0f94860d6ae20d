"""The one error tree: every failure a client can see, with its HTTP status and OpenAI body.

    OverspillError                      500  internal_error
    ├── InvalidChatRequest              400  invalid_request_error (param names the field)
    │   ├── ForbiddenParameter          400  a connection/credential field in the body
    │   ├── ContextWindowExceeded       400  code=context_length_exceeded, carries the Overflow
    │   ├── DocumentsBudgetExceeded     400  the request's documents alone exceed the budget
    │   ├── JsonTooDeep                 400  JSON nested deeper than overspill can re-encode
    │   ├── RouteNotServed              400  the model cannot serve the route (an embedding
    │   │                                    model asked to chat, embeddings from Anthropic)
    │   ├── InvalidHttpRequest          400  bytes that are not an HTTP/1.1 request
    │   ├── UnsupportedItem             400  a Responses input item only OpenAI runs (web search...)
    │   ├── UnsupportedTool             400  a Responses tool only OpenAI runs (file_search, mcp...)
    │   └── InvalidConfig               400  a reload found config.yaml unusable (old one kept)
    ├── AuthError                       401  missing or wrong key
    ├── AdminDisabled                   403  admin endpoints need a master key; none is set
    ├── AdminOnly                       403  a client key on an admin endpoint
    ├── ForbiddenOrigin                 403  code=origin_not_allowed: a web page elsewhere
    ├── ForbiddenHost                   403  code=host_not_allowed: a name not this machine's,
    │                                        on loopback (a page's DNS rebound to it)
    ├── ModelNotAllowed                 403  code=model_not_allowed: the key's `models` lack it
    ├── NotFound                        404  unknown route
    │   └── ResponseNotFound            404  no stored response with that id for this key
    ├── MethodNotAllowed                405  known route, wrong method
    ├── RequestTimeout                  408  the client sent its request too slowly
    ├── ModelNotFound                   404  code=model_not_found, lists the configured names
    ├── PayloadTooLarge                 413  body over general_settings.max_body_bytes
    ├── HeadersTooLarge                 431  request line + headers over max_header_bytes
    ├── ModelUnavailable                503  the model's secret is unset
    ├── StoreUnavailable                503  the store cannot be reached (admin endpoints)
    └── UpstreamError                   502  the provider failed; keeps status, body, provider
        ├── UpstreamBadResponse         502  a 2xx that is not the API's answer (HTML, empty, cut)
        ├── UpstreamTooLarge            502  an answer (or one stream event) over max_response_bytes
        ├── UpstreamTimeout             504
        ├── UpstreamRateLimited         429  Retry-After passed on
        └── UpstreamRejected            4xx  the provider refused the request (status kept)

Nothing here imports other project modules; providers translate their exceptions into these
classes in one place each, and the shell renders them in one place (proxy/responses.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import orjson

if TYPE_CHECKING:
    from collections.abc import Mapping


class OverspillError(Exception):
    """Base of every error overspill reports to a client."""

    status: ClassVar[int] = 500
    type: ClassVar[str] = "internal_error"
    code: ClassVar[str | None] = None

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

    def error_code(self) -> str | None:
        """The OpenAI `code` field for this error."""
        return self.code

    def http_status(self) -> int:
        """The HTTP status to answer with."""
        return self.status

    def headers(self) -> Mapping[str, str]:
        """Extra response headers (e.g. Retry-After)."""
        return {}

    def body(self) -> dict[str, Any]:
        """The OpenAI-style error body."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.error_code(),
            }
        }

    def body_bytes(self) -> bytes:
        """The error body as JSON bytes."""
        return orjson.dumps(self.body())


class InvalidChatRequest(OverspillError):
    """The client's request is malformed or ill-typed; the message says what to fix."""

    status = 400
    type = "invalid_request_error"
    code = "invalid_request"


class ForbiddenParameter(InvalidChatRequest):
    """The body carries a connection or credential setting; only config may set those."""

    code = "forbidden_parameter"


class JsonTooDeep(InvalidChatRequest):
    """The body nests arrays/objects deeper than overspill can encode again (orjson's limit)."""

    code = "json_too_deep"


ENCODE_DEPTH = 254
"""How deep orjson writes nested arrays and objects (it reads up to 1024 levels)."""


def nested_too_deep(exc: BaseException) -> bool:
    """Whether `exc` is orjson refusing to write JSON nested past `ENCODE_DEPTH`. orjson's
    `JSONEncodeError` is `TypeError` itself, so an `except orjson.JSONEncodeError` around
    more than one `orjson.dumps` catches every other TypeError too."""
    return isinstance(exc, TypeError) and str(exc) == "Recursion limit reached"


def too_deep(what: str) -> JsonTooDeep:
    """The error for JSON that was read but cannot be written again for the upstream."""
    return JsonTooDeep(
        f"{what} nests arrays/objects more than {ENCODE_DEPTH} levels deep, which overspill "
        "cannot forward: flatten it (or send the nested part as a JSON string)"
    )


class RouteNotServed(InvalidChatRequest):
    """The model cannot serve the API route the client called (its mode or its provider's API
    says so); the message names the routes it serves."""

    code = "route_not_served"

    def __init__(self, message: str) -> None:
        super().__init__(message, param="model")


class InvalidHttpRequest(InvalidChatRequest):
    """The bytes received are not a valid HTTP/1.1 request (answered before any route)."""

    code = "invalid_http_request"


class UnsupportedItem(InvalidChatRequest):
    """A Responses API input item (or content part) that only an upstream serving the Responses
    API itself can use (a web search call, an item reference, a file by URL...), sent for a
    model that overspill reaches through chat completions. The message names the item."""

    code = "unsupported_item"


class UnsupportedTool(InvalidChatRequest):
    """A Responses API tool or tool_choice that only OpenAI runs (file_search, web_search, mcp,
    ...), sent for a model that overspill reaches through chat completions, which calls only
    function tools. The message names the tool type."""

    code = "unsupported_tool"


class InvalidConfig(InvalidChatRequest):
    """A config reload was refused: the file (or a store or layer it names) cannot be used; the
    running config is kept. The message lists each problem by its YAML path."""

    code = "invalid_config"


class AuthError(OverspillError):
    """The request has no key or the wrong key."""

    status = 401
    type = "authentication_error"
    code = "invalid_api_key"


class AdminDisabled(OverspillError):
    """Admin endpoints need a master key; none is configured."""

    status = 403
    type = "permission_error"
    code = "admin_disabled"


class ForbiddenOrigin(OverspillError):
    """A web page's request (its `Origin` header) from a site `allowed_origins` does not list."""

    status = 403
    type = "permission_error"
    code = "origin_not_allowed"


class ForbiddenHost(OverspillError):
    """A request, on a gateway served on loopback, addressed (its `Host` header) to a name that
    is not this machine's and not in `allowed_hosts`: what a page whose DNS was rebound sends."""

    status = 403
    type = "permission_error"
    code = "host_not_allowed"


class AdminOnly(OverspillError):
    """A client key (a tenant's, not the master key) called an admin endpoint."""

    status = 403
    type = "permission_error"
    code = "admin_only"


class ModelNotAllowed(OverspillError):
    """The request's client key is limited to other models (`client_keys[].models`)."""

    status = 403
    type = "permission_error"
    code = "model_not_allowed"


class NotFound(OverspillError):
    """No such route."""

    status = 404
    type = "invalid_request_error"
    code = "not_found"


class ResponseNotFound(NotFound):
    """No stored Responses API response has that id for the caller's key (another key's is
    not found either: nothing tells the two apart)."""

    code = "response_not_found"


class MethodNotAllowed(OverspillError):
    """The route exists but not for this HTTP method."""

    status = 405
    type = "invalid_request_error"
    code = "method_not_allowed"


class RequestTimeout(OverspillError):
    """The client did not send its request's headers or body within the configured time."""

    status = 408
    type = "invalid_request_error"
    code = "request_timeout"


class ModelNotFound(OverspillError):
    """The requested model name is not in config.yaml."""

    status = 404
    type = "invalid_request_error"
    code = "model_not_found"


class PayloadTooLarge(OverspillError):
    """The request body is larger than the configured limit."""

    status = 413
    type = "invalid_request_error"
    code = "payload_too_large"


class UnsupportedEncoding(OverspillError):
    """The request body is compressed (a `Content-Encoding` other than identity)."""

    status = 415
    type = "invalid_request_error"
    code = "unsupported_content_encoding"


class HeadersTooLarge(OverspillError):
    """The request line and headers are larger than the configured limit."""

    status = 431
    type = "invalid_request_error"
    code = "headers_too_large"


class ModelUnavailable(OverspillError):
    """The model is configured but cannot be used (e.g. its secret is unset)."""

    status = 503
    type = "service_unavailable_error"
    code = "model_unavailable"


class StoreUnavailable(OverspillError):
    """The history store cannot be read or written, and the answer needs it (admin endpoints;
    a chat request goes on without the store instead)."""

    status = 503
    type = "service_unavailable_error"
    code = "store_unavailable"


class UpstreamError(OverspillError):
    """The provider failed; keeps what the overflow classifier and operators need."""

    status = 502
    type = "upstream_error"
    code = "upstream_error"

    def __init__(
        self,
        message: str,
        *,
        provider: str | None = None,
        upstream_status: int | None = None,
        upstream_body: object = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message, param=param)
        self.provider = provider
        self.upstream_status = upstream_status
        self.upstream_body = upstream_body


class UpstreamBadResponse(UpstreamError):
    """The upstream answered, but not with the API's response: an empty or HTML 200, a JSON
    answer cut short, a stream that stops mid-event or before its end. The message names what
    came (status, content type, size), never the body itself."""

    code = "upstream_bad_response"


class UpstreamTooLarge(UpstreamError):
    """The upstream's answer (a stream's single event) is over general_settings.max_response_bytes;
    overspill stopped reading it at the limit."""

    code = "upstream_response_too_large"


class UpstreamTimeout(UpstreamError):
    """The provider did not answer in time."""

    status = 504
    type = "timeout_error"
    code = "upstream_timeout"


class UpstreamRateLimited(UpstreamError):
    """The provider rate-limited the request; Retry-After is passed on when given."""

    status = 429
    type = "rate_limit_error"
    code = "rate_limit_exceeded"

    def __init__(self, message: str, *, retry_after: str | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after

    def headers(self) -> Mapping[str, str]:
        """Retry-After, when the provider gave one."""
        return {"retry-after": self.retry_after} if self.retry_after else {}


class UpstreamRejected(UpstreamError):
    """The provider refused the request as invalid; its 4xx status is passed on."""

    type = "invalid_request_error"
    code = "upstream_rejected"

    def http_status(self) -> int:
        """The provider's own 4xx status (400, 403, 404, 422...)."""
        status = self.upstream_status
        return status if status is not None and 400 <= status < 500 else 400


class ContextWindowExceeded(InvalidChatRequest):
    """The conversation does not fit the model's context window.

    Raised by providers when the upstream says so (the classifier's `requested` and `limit`
    when the error stated them), and by layers that know it up front (Ollama's pre-flight).
    """

    code = "context_length_exceeded"

    def __init__(
        self,
        message: str,
        *,
        requested: int | None = None,
        limit: int | None = None,
        provider: str | None = None,
        upstream_status: int | None = None,
        upstream_body: object = None,
        estimated: bool = False,
    ) -> None:
        super().__init__(message, param="messages")
        self.requested = requested
        self.limit = limit
        self.provider = provider
        self.upstream_status = upstream_status
        self.upstream_body = upstream_body
        self.estimated = estimated
        """`requested` is overspill's own estimate (a pre-flight), not an upstream's count."""

    def headers(self) -> Mapping[str, str]:
        """The sizes: the prompt's and the window's, when known."""
        found = {"x-overspill-requested-tokens": self.requested, "x-overspill-window": self.limit}
        return {key: str(value) for key, value in found.items() if value is not None}


class DocumentsBudgetExceeded(InvalidChatRequest):
    """Not even one chunk of the request's documents fits the budget: the limits disagree."""

    code = "documents_budget_exceeded"

    def __init__(self, documents_tokens: int, budget: int, count: int) -> None:
        super().__init__(
            f"the {count} best documents need {documents_tokens} tokens after compaction, and "
            f"not even their smallest chunk fits the whole context budget of {budget} tokens "
            "(documents.max_context_tokens, else the model's window minus output reserve, "
            "system prompt and safety margin). Raise documents.max_context_tokens, use a model "
            "with a larger window, or send a shorter system prompt",
            param="documents",
        )
        self.documents_tokens = documents_tokens
        self.budget = budget

    def headers(self) -> Mapping[str, str]:
        """The two numbers that disagree."""
        return {
            "x-overspill-documents-tokens": str(self.documents_tokens),
            "x-overspill-documents-budget": str(self.budget),
        }
