"""The documents layer end to end: the real OpenAI SDK, `overspill serve`, the real local model.

Documents ride in `extra_body`. Budget here: `max_context_tokens: 1200` (the model's window is
2048), SQL always compacted. Assertions are on structure and headers, never on the answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import orjson
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.e2e.conftest import Served, local_config, serve

pytestmark = pytest.mark.e2e

DOCUMENTS_BLOCK = """documents:
  max_context_tokens: 1200
  rules:
    - {language: sql, policy: always}
"""
QUESTION: list[ChatCompletionMessageParam] = [
    {"role": "system", "content": "Answer briefly from the documents."},
    {"role": "user", "content": "Which orders are large?"},
]
COMMENTED_SQL = (
    "".join(
        f"-- note {i}: this comment explains the totals column of the orders table in detail\n"
        for i in range(110)
    )
    + "SELECT id, total\nFROM orders\nWHERE total > 100\nORDER BY total DESC;\n"
)


@pytest.fixture(scope="session")
def documenting(llama_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """overspill serve with documents, history_splice and overflow_recovery."""
    config = local_config(llama_server, None)
    yield from serve(config + DOCUMENTS_BLOCK, tmp_path_factory.mktemp("documents"), llama_server)


def ask(served: Served, documents: list[dict[str, Any]], conversation: str) -> Any:
    """One request with documents; the raw response (headers and parsed body)."""
    return served.client().chat.completions.with_raw_response.create(
        model="local",
        messages=QUESTION,
        max_tokens=16,
        temperature=0,
        extra_body={"documents": documents},
        extra_headers={"X-Conversation-Id": conversation},
    )


def events(served: Served) -> list[dict[str, Any]]:
    """The `documents_budget` events logged so far."""
    lines = [orjson.loads(line) for line in served.log_lines() if '"documents_budget"' in line]
    return [line for line in lines if line.get("message", line.get("msg")) == "documents_budget"]


def test_documents_that_fit_are_sent_and_reported(documenting: Served) -> None:
    """Two small documents: 200, both placed raw, one trace event, prompt within the window."""
    before = len(events(documenting))
    raw = ask(
        documenting,
        [
            {"id": "o-1", "text": "Order 1 totals 250 euros.", "score": 0.9},
            {"id": "o-2", "text": "Order 2 totals 12 euros.", "score": 0.4},
        ],
        "e2e-docs-fit",
    )
    completion = raw.parse()
    assert raw.status_code == 200
    assert raw.headers["x-overspill-documents"] == "2/2"
    assert raw.headers["x-overspill-documents-decision"] == "appended"
    assert raw.headers["x-overspill-documents-compacted"] == "0"
    assert completion.usage is not None
    assert completion.usage.prompt_tokens < 2048
    assert len(events(documenting)) == before + 1


def test_documents_that_need_compaction_are_compacted(documenting: Served) -> None:
    """A heavily commented SQL file over the whole budget raw fits once its comments go."""
    raw = ask(
        documenting,
        [{"id": "q-17", "text": COMMENTED_SQL, "source": "db/orders.sql"}],
        "e2e-docs-compact",
    )
    assert raw.status_code == 200
    assert raw.headers["x-overspill-documents-compacted"] == "1"
    assert int(raw.headers["x-overspill-documents-tokens"]) < 200
    (event,) = [e for e in events(documenting) if e.get("conversation") == "e2e-docs-compact"]
    (trace,) = event["documents"]
    assert trace["language"] == "sql"
    assert trace["policy"] == "always"
    assert trace["tokens_before"] > 1200 > trace["tokens_after"]


def test_documents_larger_than_the_budget_go_as_chunks(documenting: Served) -> None:
    """A prose document over the whole budget: 200, sent as its chunks within the budget,
    with the chunk ids and offsets in the trace."""
    prose = "The customer asked again about the delivery of the parcel. " * 250
    raw = ask(documenting, [{"id": "log", "text": prose}], "e2e-docs-chunked")
    assert raw.status_code == 200
    assert raw.headers["x-overspill-documents"] == "1/1"
    assert raw.headers["x-overspill-documents-compacted"] == "1"
    assert int(raw.headers["x-overspill-documents-tokens"]) <= 1200
    (event,) = [e for e in events(documenting) if e.get("conversation") == "e2e-docs-chunked"]
    (trace,) = event["documents"]
    assert trace["compacted"] == "chunked"
    assert trace["tokens_before"] > 1200
    assert trace["chunks"]
    assert all(chunk["id"].startswith("log::chunk::") for chunk in trace["chunks"])


def test_a_bad_document_field_is_a_400_naming_it(documenting: Served) -> None:
    """documents[1].score must be a number."""
    with pytest.raises(openai.BadRequestError) as caught:
        ask(documenting, [{"text": "a"}, {"text": "b", "score": "high"}], "e2e-docs-bad")
    body = caught.value.body
    assert isinstance(body, dict)
    assert body.get("param") == "documents[1].score"
