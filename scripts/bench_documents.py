"""CPU cost of budgeting retrieved documents: 50 documents of ~1k tokens, no network.

Usage: ``python scripts/bench_documents.py [--documents 50] [--tokens 1000] [--runs 7]``

Documents are built from standard-library source files (real Python, deterministic, offline)
and from their docstrings (prose), with scores, half of them Python code. Each figure is the
best of `--runs` runs, in milliseconds, for: language detection, compaction, and the whole
plan (rank, rules, token counting, top_k, render) with no rules, with `always` for code, with
a tight budget (top_k clamp), and with the kept documents over the whole budget (chunked and
ranked by relevance to a question).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import inspect
import json
import pathlib
import time
from collections.abc import Callable

from kernel.documents_config import DocumentsSettings
from kernel.tokens import count_text, encoding_for
from middleware.documents.compaction import compact
from middleware.documents.language import detect_language
from middleware.documents.plan import plan_batch, render_batch
from middleware.documents.request import Document

MODULES = (json, asyncio, collections, pathlib, inspect, argparse)


def corpus(count: int, tokens: int) -> list[Document]:
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


def best(runs: int, work: Callable[[], object]) -> float:
    """The best wall time of `runs` calls, in milliseconds."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times) * 1000


def main() -> None:
    """Print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=50)
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    docs = corpus(args.documents, args.tokens)
    total = sum(count_text(d.text) for d in docs)
    count = lambda text: count_text(text) + 1  # noqa: E731
    always = DocumentsSettings.model_validate(
        {"rules": [{"language": ["python", "sql", "csharp"], "policy": "always"}]}
    )

    def plan(
        settings: DocumentsSettings, budget: int, context: int, question: str | None = None
    ) -> str:
        found = plan_batch(
            docs,
            settings,
            budget=budget,
            context_tokens=context,
            demanded=frozenset(),
            count=count,
            question=question,
        )
        return render_batch(found.placed, settings.divider)

    print(f"{args.documents} documents, {total} tokens in all; best of {args.runs} runs, ms")
    figures = {
        "detect languages": lambda: [detect_language(d.text) for d in docs],
        "compact (as python/text)": lambda: [
            compact(d.text, detect_language(d.text)) for d in docs
        ],
        "count tokens only": lambda: [count_text(d.text) for d in docs],
        "plan, no rules, all fit": lambda: plan(DocumentsSettings(), 10**6, 0),
        "plan, always compact code": lambda: plan(always, 10**6, 0),
        "plan, tight budget (top_k)": lambda: plan(DocumentsSettings(), 60_000, 55_000),
        "plan, over the budget (chunks)": lambda: plan(
            DocumentsSettings(), 5_000, 500, "How is a JSON object decoded into a dict?"
        ),
    }
    for name, work in figures.items():
        print(f"  {name:<30} {best(args.runs, work):8.1f}")


if __name__ == "__main__":
    main()
