"""What the redactor costs a log line and an upstream error body, with no secrets configured
and with ten OpenAI-sized keys (plus a URL password): the ratio within each group."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator

import orjson
import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from kernel import redaction
from proxy.logs import JsonFormatter

FIELDS = {
    "request_id": secrets.token_hex(16), "tenant": secrets.token_hex(8), "model": "gpt-4o",
    "stream": False, "status": 200, "ms": 812.4,
    "notes": {"action": "spliced", "tokens-before": "91234", "tokens-after": "20211"},
}  # fmt: skip
RECORD = logging.makeLogRecord(
    {"name": "overspill.request", "msg": "request", "levelname": "INFO", **FIELDS}
)
BODY = orjson.dumps(
    {"error": {"message": "Rate limit reached for gpt-4o in organization org-abc on "
               "tokens per min (TPM): Limit 30000, Used 29000, Requested 2000. Please "
               "try again in 2s. Visit https://platform.openai.com/account/rate-limits "
               "to learn more.", "type": "tokens", "param": None, "code": "rate_limit"}}
)  # fmt: skip
KEYS = ["sk-proj-" + secrets.token_urlsafe(48) for _ in range(10)]


@pytest.fixture(params=["no secrets", "10 secrets"])
def redactor(request: pytest.FixtureRequest) -> Iterator[redaction.Redactor]:
    """The process's redactor for the benchmark, put back after."""
    made = redaction.Redactor([*KEYS, "pa55-w0rd-123"] if request.param != "no secrets" else [])
    saved, redaction.redactor = redaction.redactor, made
    yield made
    redaction.redactor = saved


def test_log_line(benchmark: BenchmarkFixture, redactor: redaction.Redactor) -> None:
    """A chat request's JSON log line, formatted."""
    benchmark.group = "redaction: log line"
    benchmark(JsonFormatter().format, RECORD)


def test_error_body(benchmark: BenchmarkFixture, redactor: redaction.Redactor) -> None:
    """A 300-byte upstream error body, redacted."""
    benchmark.group = "redaction: error body"
    benchmark(redactor.redact_bytes, BODY)
