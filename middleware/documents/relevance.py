"""How relevant a passage is to a question: Okapi BM25 over words, deterministic and local.

Words are Unicode letter-or-digit runs, case-folded; identifiers are split at underscores and
camelCase humps (`QueryAsync` is `query async`), and a plural `s` is folded (`orders` is
`order`), the same way for the question and the passages. No model, no network: the same
question and passages always give the same scores.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

K1 = 1.2
B = 0.75
_WORD = re.compile(r"[^\W_]+")
_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def terms(text: str) -> list[str]:
    """The text's words, in order, as BM25 compares them."""
    return [_fold(part) for word in _WORD.findall(text) for part in _HUMP.split(word) if part]


def _fold(word: str) -> str:
    folded = word.casefold()
    if len(folded) > 3 and folded.endswith("s") and not folded.endswith("ss"):
        return folded[:-1]
    return folded


def bm25(question: str | None, passages: Sequence[str]) -> list[float]:
    """Each passage's BM25 score for the question's words (all 0.0 without a question)."""
    asked = list(dict.fromkeys(terms(question or "")))
    if not asked or not passages:
        return [0.0] * len(passages)
    counted = [Counter(terms(passage)) for passage in passages]
    lengths = [sum(words.values()) for words in counted]
    average = sum(lengths) / len(lengths) or 1.0
    weights = {term: _idf(sum(term in words for words in counted), len(counted)) for term in asked}
    return [
        sum(_term_score(words[term], weights[term], length / average) for term in asked)
        for words, length in zip(counted, lengths, strict=True)
    ]


def _idf(holding: int, total: int) -> float:
    """Rarer words weigh more; never negative (the `1 +` form)."""
    return math.log(1 + (total - holding + 0.5) / (holding + 0.5))


def _term_score(frequency: int, weight: float, relative_length: float) -> float:
    if not frequency:
        return 0.0
    saturation = frequency * (K1 + 1) / (frequency + K1 * (1 - B + B * relative_length))
    return weight * saturation
