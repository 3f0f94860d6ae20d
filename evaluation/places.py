"""Where a probe's right value stood in what the model was shown. Pure.

Whether the value is in the prompt at all (``Row.present``) does not say whether a reader
finds it: a small reader answers from what it read last, and overspill's quoted turns stand
right before the question. So each row says where the value stood: in the quoted turns'
last excerpt (`LAST`), earlier in the quoted turns (`QUOTED`), elsewhere in the prompt (the
extraction's notes, the turns sent verbatim: `SHOWN`), or nowhere (`OUT`). The report counts
the answers right by place, so a change to what is quoted, or where, is read as what it does
to the reader, not only to the value's presence.
"""

from __future__ import annotations

from collections.abc import Callable

from middleware.condensing.relevance import GAP, LABEL

LAST = "last excerpt"
"""In the quoted turns' last excerpt (`last_excerpt`), read right before the question."""
QUOTED = "quoted earlier"
"""In the quoted turns, before their last excerpt."""
SHOWN = "shown, not quoted"
"""In the prompt, outside the quoted turns (or nothing was quoted)."""
OUT = "not shown"
"""Nowhere in the prompt."""
PLACES = (LAST, QUOTED, SHOWN, OUT)


def quoted_turns(shown: str) -> str:
    """The block of quoted turns in `shown` (from its label on); "" when nothing is quoted."""
    at = shown.rfind(LABEL)
    return shown[at:] if at >= 0 else ""


def last_excerpt(shown: str) -> str:
    """The quoted turns' last excerpt in `shown` (the block's passages after its last gap
    line, all of them when it has none); "" when nothing is quoted."""
    return quoted_turns(shown).rsplit(f"\n{GAP}\n", 1)[-1]


def stood(present: Callable[[str], bool], shown: str) -> str:
    """Where the value `present` looks for stood in `shown`: the first of `PLACES` holding
    it (the nearest the question)."""
    if present(last_excerpt(shown)):
        return LAST
    if present(quoted_turns(shown)):
        return QUOTED
    return SHOWN if present(shown) else OUT
