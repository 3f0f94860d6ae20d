"""Budgeting retrieved documents: 50 documents of ~1k tokens, no network.

Documents are cut from standard-library source files (real Python) and their docstrings
(prose), alternately, with scores. Rows: language detection, compaction, token counting
alone, and the whole plan (rank, rules, token counting, top_k, render) with no rules, with
`always` for code, with a tight budget (top_k clamp), and over the whole budget (chunked and
ranked by relevance to a question). One round handles all 50 documents.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import inspect
import json
import pathlib
from collections.abc import Callable

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from kernel.documents_config import DocumentsSettings
from kernel.tokens import count_text, encoding_for
from middleware.documents.compaction import compact
from middleware.documents.language import detect_language
from middleware.documents.plan import plan_batch, render_batch
from middleware.documents.request import Document

MODULES = (json, asyncio, collections, pathlib, inspect, argparse)
ALWAYS = DocumentsSettings.model_validate(
    {"rules": [{"language": ["python", "sql", "csharp"], "policy": "always"}]}
)


def corpus(count: int = 50, tokens: int = 1000) -> list[Document]:
    """`count` documents of about `tokens` tokens each: alternately Python code and prose."""
    encoding = encoding_for("")
    code = "\n".join(pathlib.Path(inspect.getfile(m)).read_text() for m in MODULES)
    prose = "\n\n".join(inspect.getdoc(m) or "" for m in MODULES for _, m in inspect.getmembers(m))
    sources = [encoding.encode_ordinary(code), encoding.encode_ordinary(prose)]
    docs = []
    for index in range(count):
        tokens_of = sources[index % 2]
        start = (index // 2 * tokens) % max(1, len(tokens_of) - tokens)
        text = encoding.decode(tokens_of[start : start + tokens])
        docs.append(
            Document(index=index, text=text, id=f"d{index}", score=(index * 37 % 100) / 100)
        )
    return docs


DOCS = corpus()


def _count(text: str) -> int:
    return count_text(text) + 1


def plan(
    settings: DocumentsSettings, budget: int, context: int, question: str | None = None
) -> str:
    found = plan_batch(
        DOCS, settings, budget=budget, context_tokens=context, demanded=frozenset(),
        count=_count, question=question,
    )  # fmt: skip
    return render_batch(found.placed, settings.divider)


WORK: dict[str, Callable[[], object]] = {
    "detect languages": lambda: [detect_language(d.text) for d in DOCS],
    "compact (as python/text)": lambda: [compact(d.text, detect_language(d.text)) for d in DOCS],
    "count tokens only": lambda: [count_text(d.text) for d in DOCS],
    "plan, no rules, all fit": lambda: plan(DocumentsSettings(), 10**6, 0),
    "plan, always compact code": lambda: plan(ALWAYS, 10**6, 0),
    "plan, tight budget (top_k)": lambda: plan(DocumentsSettings(), 60_000, 55_000),
    "plan, over the budget (chunks)": lambda: plan(
        DocumentsSettings(), 5_000, 500, "How is a JSON object decoded into a dict?"
    ),
}


@pytest.mark.parametrize("work", list(WORK))
def test_documents(benchmark: BenchmarkFixture, work: str) -> None:
    """One piece of the documents layer's work over the 50 documents."""
    benchmark.group = "documents: 50 x ~1k tokens"
    benchmark(WORK[work])
