"""Tests for middleware.condensing.chunking: token windows, exact offsets, ids, neighbour expansion."""

from __future__ import annotations

import hashlib
import re
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from kernel.tokens import count_text
from middleware.condensing.chunking import BOUNDARY_SEPARATOR, Chunk, chunk_text, expand_neighbors

ID_PATTERN = re.compile(r"^(?P<artifact>.+)::chunk::(?P<index>\d{3,})::(?P<sha8>[0-9a-f]{8})$")


def words(n: int) -> str:
    """Return a text of exactly n cl100k_base tokens (" a" is one token)."""
    text = " a" * n
    assert count_text(text) == n
    return text


def check_invariants(chunks: list[Chunk], text: str, artifact_id: str) -> None:
    """Assert the properties every chunking must have."""
    for position, chunk in enumerate(chunks):
        assert chunk.index == position
        assert chunk.text == text[chunk.start_char : chunk.end_char]
        assert chunk.token_count == count_text(chunk.text)
        match = ID_PATTERN.match(chunk.id)
        assert match is not None
        assert match["artifact"] == artifact_id
        assert int(match["index"]) == position
        assert match["sha8"] == hashlib.sha256(chunk.text.encode()).hexdigest()[:8]
    assert len({chunk.id for chunk in chunks}) == len(chunks)
    if text:
        assert chunks[0].start_char == 0
        assert chunks[-1].end_char == len(text)
    for before, after in pairwise(chunks):
        assert before.start_char < after.start_char <= before.end_char < after.end_char


def test_empty_text_gives_no_chunks() -> None:
    """Empty text has nothing to store, so no chunks."""
    assert chunk_text("art", "") == []


@pytest.mark.parametrize("n", [1, 1199, 1200])
def test_up_to_single_chunk_max_is_one_chunk(n: int) -> None:
    """At most 1200 tokens gives one chunk covering the whole text."""
    text = words(n)
    [chunk] = chunk_text("art", text)
    assert (chunk.index, chunk.start_char, chunk.end_char) == (0, 0, len(text))
    assert (chunk.text, chunk.token_count) == (text, n)


def test_1201_tokens_is_two_overlapping_windows() -> None:
    """1201 tokens gives windows [0, 900) and [800, 1201) in tokens."""
    text = words(1201)
    first, second = chunk_text("art", text)
    assert (first.token_count, second.token_count) == (900, 401)
    assert (first.start_char, first.end_char) == (0, 2 * 900)
    assert (second.start_char, second.end_char) == (2 * 800, len(text))
    check_invariants([first, second], text, "art")


def test_overlap_is_the_last_100_tokens_of_the_previous_chunk() -> None:
    """Chunk N+1 starts with the last 100 tokens of chunk N."""
    chunks = chunk_text("art", words(3000))
    for before, after in pairwise(chunks):
        shared = before.text[after.start_char - before.start_char :]
        assert after.text.startswith(shared)
        assert count_text(shared) == 100


def test_last_window_ends_at_text_end_without_a_redundant_tail() -> None:
    """1700 tokens gives exactly two windows; the seed's third, contained one is not made."""
    chunks = chunk_text("art", words(1700))
    assert [c.token_count for c in chunks] == [900, 900]
    assert chunks[-1].end_char == len(words(1700))


def test_chunking_is_deterministic_and_ids_depend_on_artifact() -> None:
    """The same input gives identical chunks; another artifact id changes only the ids' prefix."""
    text = words(2500)
    assert chunk_text("art", text) == chunk_text("art", text)
    ids = [c.id.removeprefix("other") for c in chunk_text("other", text)]
    assert ids == [c.id.removeprefix("art") for c in chunk_text("art", text)]


def test_ids_follow_the_seed_format() -> None:
    """Ids are {artifact_id}::chunk::{index:03d}::{first 8 hex of sha256(text)}."""
    chunks = chunk_text("art_9f2ca8b1", words(2500))
    sha8 = hashlib.sha256(chunks[2].text.encode()).hexdigest()[:8]
    assert chunks[2].id == f"art_9f2ca8b1::chunk::002::{sha8}"


def test_offsets_are_exact_when_tokens_split_characters() -> None:
    """Emoji and CJK split across tokens still give exact, whole-character chunks."""
    text = "🏳️‍🌈 日本語のテキスト 👨‍👩‍👧‍👦 naïve " * 400
    chunks = chunk_text("art", text, chunk_tokens=300, overlap_tokens=50, single_chunk_max=300)
    assert len(chunks) > 10
    check_invariants(chunks, text, "art")
    assert all(c.token_count <= 300 for c in chunks)


def test_window_edges_inside_a_character_move_to_character_edges() -> None:
    """An end inside a character is pulled back to fit; a start inside one moves back."""
    # "a" then emoji of two tokens each: b"\xf0\x9f\x98" and the continuation b"\x80".
    text = "a" + "😀" * 700
    chunks = chunk_text("art", text, chunk_tokens=300, overlap_tokens=101, single_chunk_max=0)
    check_invariants(chunks, text, "art")
    # Tokens [0, 300) end inside emoji 150; widened it would be 301 tokens, so the window
    # ends at token 299 (char 150). The next starts at token 198, the second half of emoji 98,
    # so its text starts at that emoji (char 99).
    assert (chunks[0].start_char, chunks[0].end_char, chunks[0].token_count) == (0, 150, 299)
    assert chunks[1].start_char == 99
    assert all(c.token_count <= 300 for c in chunks)


def test_special_token_text_is_chunked_as_ordinary_text() -> None:
    """Text that spells <|endoftext|> is chunked, not rejected."""
    text = "<|endoftext|> hello " * 500
    check_invariants(chunk_text("art", text), text, "art")


def test_lone_surrogate_is_rejected() -> None:
    """Text that is not valid Unicode is refused with a ValueError."""
    with pytest.raises(ValueError, match="lone surrogate"):
        chunk_text("art", "abc\ud800")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"artifact_id": ""}, "artifact_id must be a non-empty"),
        ({"chunk_tokens": 8}, "chunk_tokens must be at least 16"),
        ({"overlap_tokens": -1}, "overlap_tokens must be >= 0"),
        ({"chunk_tokens": 100, "overlap_tokens": 100}, "overlap_tokens must be >= 0 and < chunk"),
        ({"single_chunk_max": -1}, "single_chunk_max must be >= 0"),
    ],
)
def test_bad_arguments_say_what_to_fix(kwargs: dict[str, Any], message: str) -> None:
    """Invalid sizes raise ValueError naming the argument."""
    arguments: dict[str, Any] = {"artifact_id": "art", "text": "x", **kwargs}
    with pytest.raises(ValueError, match=message):
        chunk_text(**arguments)


_alphabet = st.sampled_from(
    ["a", " ", "\n", "é", "日", "😀", "👨‍👩‍👧", "\U0001d518", "hello", "<|endoftext|>"]
)
_texts = st.lists(_alphabet, max_size=400).map("".join)


@settings(max_examples=80, deadline=None)
@given(
    text=st.one_of(_texts, st.text(min_size=20, max_size=800)),
    chunk_tokens=st.integers(16, 64),
    overlap_ratio=st.floats(0, 0.95),
    single_chunk_max=st.integers(0, 40),
)
def test_chunking_properties(
    text: str, chunk_tokens: int, overlap_ratio: float, single_chunk_max: int
) -> None:
    """Offsets exact, text covered, neighbours overlap, ids well-formed, windows bounded."""
    overlap = int(chunk_tokens * overlap_ratio)
    kwargs: dict[str, Any] = {
        "chunk_tokens": chunk_tokens,
        "overlap_tokens": overlap,
        "single_chunk_max": single_chunk_max,
    }
    chunks = chunk_text("doc", text, **kwargs)
    event("chunks", "none" if not chunks else "one" if len(chunks) == 1 else "several")
    assert chunks == chunk_text("doc", text, **kwargs)
    check_invariants(chunks, text, "doc")
    if len(chunks) == 1:
        assert chunks[0].token_count <= max(single_chunk_max, chunk_tokens)
    else:
        assert all(c.token_count <= chunk_tokens for c in chunks)
    if overlap == 0:
        return
    for before, after in pairwise(chunks):
        assert after.start_char < before.end_char


def six_chunks() -> list[Chunk]:
    """Return the chunks of a 4500-token text: six windows."""
    chunks = chunk_text("art", words(4500))
    assert len(chunks) == 6
    return chunks


def test_expand_neighbors_joins_previous_target_and_next() -> None:
    """Chunk 3 expands to chunks 2, 3, 4 separated by a [CHUNK BOUNDARY] line."""
    chunks = six_chunks()
    expanded = expand_neighbors(chunks, 3)
    assert expanded == "\n[CHUNK BOUNDARY]\n".join(c.text for c in chunks[2:5])
    assert expanded.count(BOUNDARY_SEPARATOR) == 2


@pytest.mark.parametrize(("index", "radius", "expected"), [(0, 1, [0, 1]), (5, 1, [4, 5])])
def test_expand_neighbors_at_edges(index: int, radius: int, expected: list[int]) -> None:
    """The first and last chunk have one neighbour."""
    chunks = six_chunks()
    assert expand_neighbors(chunks, index, radius) == BOUNDARY_SEPARATOR.join(
        chunks[i].text for i in expected
    )


def test_expand_neighbors_radius() -> None:
    """Radius 0 is the chunk alone; radius 2 takes two each side."""
    chunks = six_chunks()
    assert expand_neighbors(chunks, 2, radius=0) == chunks[2].text
    assert expand_neighbors(chunks, 2, radius=2).count(BOUNDARY_SEPARATOR) == 4


def test_expand_neighbors_uses_chunk_indices_not_positions() -> None:
    """A partial list works: neighbours are found by index and missing ones skipped."""
    chunks = six_chunks()
    partial = [chunks[1], chunks[3], chunks[4]]
    assert expand_neighbors(partial, 3) == BOUNDARY_SEPARATOR.join([chunks[3].text, chunks[4].text])


@pytest.mark.parametrize(("index", "radius", "message"), [(6, 1, "no chunk"), (1, -1, "radius")])
def test_expand_neighbors_rejects_bad_arguments(index: int, radius: int, message: str) -> None:
    """An unknown index or a negative radius raises ValueError."""
    with pytest.raises(ValueError, match=message):
        expand_neighbors(six_chunks(), index, radius)
