"""Token-window chunking of long texts: cl100k_base windows with overlap.

A text of at most ``single_chunk_max`` tokens is one chunk. A longer one is cut into windows
of ``chunk_tokens`` tokens whose starts advance by ``chunk_tokens - overlap_tokens``; the last
window ends at the end of the text and no window lies wholly inside the one before it (the
seed's loop appended such a redundant tail window).

Offsets are exact: ``chunk.text == text[chunk.start_char:chunk.end_char]``. A token may end
inside a multi-byte character (emoji, CJK); a window start inside a character moves back to
the character's start and a window end moves forward to the character's end, so chunks cover
whole characters and together cover the text. ``token_count`` is the count of the chunk's own
text (what it costs when sent); when widening to whole characters or re-tokenizing the cut
text makes that exceed ``chunk_tokens``, the window's end is pulled back until it fits, and
the next window starts ``overlap_tokens`` before that end. Empty text gives no chunks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

import tiktoken

from kernel.tokens import load_encoding

__all__ = ["BOUNDARY_SEPARATOR", "MIN_CHUNK_TOKENS", "Chunk", "chunk_text", "expand_neighbors"]

ENCODING_NAME = "cl100k_base"
# Neighbour texts are joined with the marker on a line of its own (the seed's format).
BOUNDARY_SEPARATOR = "\n[CHUNK BOUNDARY]\n"
# Below this a window could not hold the few tokens one widened character may take.
MIN_CHUNK_TOKENS = 16
_CONTINUATION_BYTES = bytes(range(0x80, 0xC0))


@dataclass(frozen=True, slots=True)
class Chunk:
    """One window of a text: its id, position, exact character range and token count."""

    id: str
    index: int
    text: str
    start_char: int
    end_char: int
    token_count: int


@dataclass(frozen=True, slots=True)
class _Boundaries:
    """Character positions of every token boundary, rounded down and up to whole characters."""

    floor: list[int]
    ceil: list[int]


def _validate(artifact_id: str, chunk_tokens: int, overlap_tokens: int, single_max: int) -> None:
    """Raise ValueError saying which argument to fix."""
    if not artifact_id:
        raise ValueError("artifact_id must be a non-empty string")
    if chunk_tokens < MIN_CHUNK_TOKENS:
        raise ValueError(f"chunk_tokens must be at least {MIN_CHUNK_TOKENS}, got {chunk_tokens}")
    if not 0 <= overlap_tokens < chunk_tokens:
        raise ValueError(
            f"overlap_tokens must be >= 0 and < chunk_tokens ({chunk_tokens}), got {overlap_tokens}"
        )
    if single_max < 0:
        raise ValueError(f"single_chunk_max must be >= 0, got {single_max}")


def _boundaries(encoding: tiktoken.Encoding, tokens: list[int]) -> _Boundaries:
    """Map each token boundary (0..len(tokens)) to character offsets in the decoded text."""
    pieces = encoding.decode_tokens_bytes(tokens)
    # A character starts at every byte that is not a UTF-8 continuation byte.
    starts = list(
        accumulate((len(p.translate(None, _CONTINUATION_BYTES)) for p in pieces), initial=0)
    )
    floor = starts.copy()
    for i, piece in enumerate(pieces):
        if piece[0] & 0xC0 == 0x80:  # the boundary before token i falls inside a character
            floor[i] -= 1
    return _Boundaries(floor=floor, ceil=starts)


def _make_chunk(artifact_id: str, index: int, text: str, start: int, end: int, count: int) -> Chunk:
    """Build a chunk with its deterministic id ``{artifact_id}::chunk::{index:03d}::{sha8}``."""
    sha8 = hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]
    return Chunk(f"{artifact_id}::chunk::{index:03d}::{sha8}", index, text, start, end, count)


def chunk_text(
    artifact_id: str,
    text: str,
    *,
    chunk_tokens: int = 900,
    overlap_tokens: int = 100,
    single_chunk_max: int = 1200,
) -> list[Chunk]:
    """Split text into overlapping token windows with exact character offsets."""
    _validate(artifact_id, chunk_tokens, overlap_tokens, single_chunk_max)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"text is not valid Unicode (lone surrogate at {exc.start})") from exc
    if not text:
        return []
    encoding = load_encoding(ENCODING_NAME)
    tokens = encoding.encode_ordinary(text)
    if len(tokens) <= single_chunk_max:
        return [_make_chunk(artifact_id, 0, text, 0, len(text), len(tokens))]
    bounds = _boundaries(encoding, tokens)
    chunks: list[Chunk] = []
    pos = 0
    while True:
        end, piece, count = _window(encoding, text, bounds, pos, len(tokens), chunk_tokens)
        start_char, end_char = bounds.floor[pos], bounds.ceil[end]
        if not chunks or end_char > chunks[-1].end_char:  # else it adds nothing: skip it
            chunks.append(_make_chunk(artifact_id, len(chunks), piece, start_char, end_char, count))
        if end == len(tokens):
            return chunks
        nxt = max(pos + 1, min(pos + chunk_tokens - overlap_tokens, end - overlap_tokens))
        while bounds.floor[nxt] == start_char:  # tokens inside one character: start past it
            nxt += 1
        pos = nxt


def _window(
    encoding: tiktoken.Encoding, text: str, bounds: _Boundaries, pos: int, n: int, size: int
) -> tuple[int, str, int]:
    """Return the end token, text and token count of the window starting at token ``pos``.

    The window holds ``size`` tokens (fewer at the end of the text), pulled back further while
    its text, widened to whole characters and tokenized on its own, is over ``size`` tokens.
    """
    end = min(pos + size, n)
    while True:
        piece = text[bounds.floor[pos] : bounds.ceil[end]]
        count = len(encoding.encode_ordinary(piece))
        if count <= size or end - pos <= 1:
            return end, piece, count
        end = max(pos + 1, end - (count - size))


def expand_neighbors(chunks: Sequence[Chunk], index: int, radius: int = 1) -> str:
    """Join the texts of chunk ``index`` and up to ``radius`` neighbours each side.

    Texts are joined by ``BOUNDARY_SEPARATOR`` ("\\n[CHUNK BOUNDARY]\\n"), in index order.
    Chunks are found by their ``index`` field, so a partial list works; neighbours that are
    absent are skipped. Overlapping text between neighbours appears in both.
    """
    if radius < 0:
        raise ValueError(f"radius must be >= 0, got {radius}")
    by_index = {chunk.index: chunk for chunk in chunks}
    if index not in by_index:
        raise ValueError(f"no chunk with index {index} among {len(by_index)} chunks")
    wanted = range(index - radius, index + radius + 1)
    return BOUNDARY_SEPARATOR.join(by_index[i].text for i in wanted if i in by_index)
