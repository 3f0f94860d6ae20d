"""Upstream failures into the error tree: an overflow is recognised whatever its status."""

from __future__ import annotations

import pytest

from kernel.errors import (
    ContextWindowExceeded,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamRejected,
    UpstreamTimeout,
)
from providers.failures import classify_failure

GEMINI_500 = {
    "error": {"code": 500, "status": "INTERNAL", "message": "The input context is too long."}
}


def test_geminis_500_too_long_is_an_overflow() -> None:
    """Gemini reports a too-long input as 500 INTERNAL: still an overflow, so it is recovered."""
    error = classify_failure(
        status=500, message="The input context is too long.", body=GEMINI_500, provider="gemini"
    )
    assert isinstance(error, ContextWindowExceeded)
    assert error.provider == "gemini"


@pytest.mark.parametrize(
    ("status", "message", "kind"),
    [
        (500, "An internal error has occurred.", UpstreamError),
        (429, "Rate limit reached for requests", UpstreamRateLimited),
        (504, "deadline exceeded", UpstreamTimeout),
        (400, "temperature must be at most 2", UpstreamRejected),
    ],
)
def test_other_failures_keep_their_class(status: int, message: str, kind: type) -> None:
    """Everything that is not an overflow maps by status, never to ContextWindowExceeded."""
    error = classify_failure(status=status, message=message)
    assert type(error) is kind
