"""Token cutting: a text cut to a token budget, with a visible marker where it was cut."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import tiktoken

from kernel.tokens import count_text, encoding_for

__all__ = ["cut_middle", "cut_tail"]

Render = Callable[[tiktoken.Encoding, Sequence[int], int], str]
"""A cut text keeping `keep` of the tokens, with its marker."""


def cut_tail(text: str, max_tokens: int, model: str = "") -> str:
    """The text's head within max_tokens, ending with a ``[… N tokens cut …]`` marker."""
    return _cut(text, max_tokens, model, 12, _tail_cut)


def cut_middle(text: str, max_tokens: int, model: str = "") -> str:
    """Keep the text's head and tail within max_tokens, marking ``[… N tokens omitted …]``."""
    return _cut(text, max_tokens, model, 14, _middle_cut)


def _tail_cut(encoding: tiktoken.Encoding, tokens: Sequence[int], keep: int) -> str:
    """The first `keep` tokens and the marker."""
    return f"{_decode(encoding, tokens[:keep]).rstrip()}\n[… {len(tokens) - keep} tokens cut …]"


def _middle_cut(encoding: tiktoken.Encoding, tokens: Sequence[int], keep: int) -> str:
    """`keep` tokens, half from the head and half from the tail, the marker between."""
    head_n, tail_n = (keep + 1) // 2, keep // 2
    head = _decode(encoding, tokens[:head_n])
    tail = _decode(encoding, tokens[len(tokens) - tail_n :]) if tail_n else ""
    return f"{head}\n[… {len(tokens) - head_n - tail_n} tokens omitted …]\n{tail}"


def _cut(text: str, max_tokens: int, model: str, marker_tokens: int, render: Render) -> str:
    """The text when it fits, else its cut within max_tokens (a bare head if no marker fits)."""
    encoding = encoding_for(model)
    tokens = encoding.encode_ordinary(text)
    if len(tokens) <= max_tokens:
        return text
    keep = max_tokens - marker_tokens
    out = _shrink(lambda n: render(encoding, tokens, n), keep, max_tokens, model)
    if out is None:
        head = _shrink(
            lambda n: _decode(encoding, tokens[:n]), max(0, max_tokens), max_tokens, model
        )
        out = head or ""
    return out


def _shrink(render: Callable[[int], str], keep: int, max_tokens: int, model: str) -> str | None:
    """The first `render(keep)` counting at most max_tokens, keep lowered by each excess;
    None once keep reaches 0."""
    while keep > 0:
        out = render(keep)
        over = count_text(out, model) - max_tokens
        if over <= 0:
            return out
        keep -= over
    return None


def _decode(encoding: tiktoken.Encoding, tokens: Sequence[int]) -> str:
    """Decode tokens, dropping a character split at either end."""
    return encoding.decode_bytes(list(tokens)).decode("utf-8", errors="ignore")
