"""The overflow classifier's fixture corpus, for its tests and its report script.

Each entry carries a `split`: "tuned" (the classifier's rules may be fitted to it) or
"held_out" (scored only, never used to tune). The split is a fixed rule of the entry's
`source`, so every rendering of one server's wording lands on the same side:

    k = first 4 bytes of sha256(source), big-endian
    held_out  iff  k % 3 == 0 for round-2 entries (gathered from servers' own source and docs)
              iff  k % 6 == 0 for round-1 entries (the original corpus)

`split_of` states that rule; a test checks every stored split against it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

CORPUS_PATH = Path(__file__).resolve().parent / "fixtures" / "overflow_corpus.jsonl"
UNSEEN_PATH = Path(__file__).resolve().parent / "fixtures" / "overflow_unseen.jsonl"
"""A second set, gathered at the same time by another engineer from the same kinds of sources
(servers' source, docs, issue threads), deduplicated against the corpus and never shown to
the classifier's author: the only errors the rules were not written against. It is scored by
`scripts/overflow_report.py` and by no test with a threshold. Do not tune on it; whoever looks
at its misses says so and gathers a fresh one."""
SPLITS = ("tuned", "held_out")


def split_of(entry: dict[str, Any]) -> str:
    """The split an entry belongs to, by the rule in this module's docstring."""
    k = int.from_bytes(hashlib.sha256(entry["source"].encode()).digest()[:4], "big")
    modulus = 3 if entry.get("round") == 2 else 6
    return "held_out" if k % modulus == 0 else "tuned"


def load_corpus(split: str | None = None) -> list[dict[str, Any]]:
    """The corpus entries (of one split, or all); a body {"$bytes": text} stands for raw bytes."""
    entries = _read(CORPUS_PATH)
    return [entry for entry in entries if split is None or entry["split"] == split]


def load_unseen() -> list[dict[str, Any]]:
    """The independently gathered set (see UNSEEN_PATH)."""
    return _read(UNSEEN_PATH)


def _read(path: Path) -> list[dict[str, Any]]:
    entries = [json.loads(line) for line in path.read_text().splitlines() if line]
    for entry in entries:
        body = entry["body"]
        if isinstance(body, dict) and set(body) == {"$bytes"}:
            entry["body"] = body["$bytes"].encode()
    return entries
