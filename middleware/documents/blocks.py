"""A planned document and its `--- DOCUMENT ---` block: what is sent, and what it costs.

A block is deterministic: header, id, source, language, how it was compacted, which chunks
(for a document sent as excerpts), then its text. Its cost is the estimator's count of the
rendered block; the batch message adds the divider and its framing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from middleware.condensing.chunking import Chunk
from middleware.documents.request import Document

BLOCK_HEADER = "--- DOCUMENT ---"
MESSAGE_OVERHEAD = 8
"""Tokens of the batch message's role and framing, and rounding slack."""
DIVIDER_TOKENS = 4
Count = Callable[[str], int]


@dataclass(frozen=True, slots=True)
class Excerpt:
    """The chunks of a document sent in its place (in order), out of how many it has."""

    chunks: tuple[Chunk, ...]
    total: int
    chunked_from: str
    """How the chunked text was placed before chunking: `raw` or `compacted`."""

    def describe(self) -> str:
        """Which chunks, counted from 1: `2-4, 9 of 14`."""
        return f"{', '.join(_span(run) for run in self.runs())} of {self.total}"

    def runs(self) -> list[list[Chunk]]:
        """The chunks in runs of consecutive indices."""
        runs: list[list[Chunk]] = []
        for chunk in self.chunks:
            if runs and runs[-1][-1].index + 1 == chunk.index:
                runs[-1].append(chunk)
            else:
                runs.append([chunk])
        return runs

    def trace(self) -> list[dict[str, Any]]:
        """Each chunk's id and character range in the chunked text."""
        return [
            {"id": c.id, "start_char": c.start_char, "end_char": c.end_char} for c in self.chunks
        ]


def _span(run: Sequence[Chunk]) -> str:
    first, last = run[0].index + 1, run[-1].index + 1
    return str(first) if first == last else f"{first}-{last}"


@dataclass(frozen=True, slots=True)
class Placed:
    """A document as planned: its language, the rule applied, its text and block tokens."""

    doc: Document
    language: str
    policy: str
    how: str
    text: str
    tokens_before: int
    tokens_after: int
    excerpt: Excerpt | None = None

    def trace(self) -> dict[str, Any]:
        """This document's part of the `documents_budget` event."""
        found: dict[str, Any] = {
            "id": self.doc.id,
            "language": self.language,
            "policy": self.policy,
            "compacted": self.how,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
        }
        if self.excerpt is not None:
            found["chunked_from"] = self.excerpt.chunked_from
            found["chunks_of"] = self.excerpt.total
            found["chunks"] = self.excerpt.trace()
        return found

    def render(self) -> str:
        """This document's block."""
        return render_block(self.doc, self.language, self.text, self.how, self.excerpt)


def render_block(
    doc: Document, language: str, text: str, how: str, excerpt: Excerpt | None = None
) -> str:
    """One deterministic `--- DOCUMENT ---` block."""
    lines = [BLOCK_HEADER, f"id: {doc.id}"]
    if doc.source is not None:
        lines.append(f"source: {doc.source}")
    compacted = "false" if how == "raw" else "true" if how == "compacted" else how
    lines += [f"language: {language}", f"compact: {compacted}"]
    if excerpt is not None:
        lines.append(f"chunks: {excerpt.describe()}")
    return "\n".join([*lines, "text:", text])


def place(
    doc: Document,
    language: str,
    policy: str,
    how: str,
    text: str,
    count: Count,
    excerpt: Excerpt | None = None,
) -> Placed:
    """A planned document, its block counted raw and as placed."""
    before = count(render_block(doc, language, doc.text, "raw")) + 1
    after = before if how == "raw" else count(render_block(doc, language, text, how, excerpt)) + 1
    return Placed(doc, language, policy, how, text, before, after, excerpt)


def batch_tokens(placed: Sequence[Placed], divider_tokens: int = DIVIDER_TOKENS) -> int:
    """The batch message's cost (blocks + divider + framing); 0 for no documents."""
    if not placed:
        return 0
    return MESSAGE_OVERHEAD + divider_tokens + sum(p.tokens_after for p in placed)
