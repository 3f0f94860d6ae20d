"""The overflow classifier's fixture corpus, for its tests and its report script."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CORPUS_PATH = Path(__file__).resolve().parent / "fixtures" / "overflow_corpus.jsonl"


def load_corpus() -> list[dict[str, Any]]:
    """The corpus entries; a body {"$bytes": text} stands for the raw bytes of that text."""
    entries = [json.loads(line) for line in CORPUS_PATH.read_text().splitlines() if line]
    for entry in entries:
        body = entry["body"]
        if isinstance(body, dict) and set(body) == {"$bytes"}:
            entry["body"] = body["$bytes"].encode()
    return entries
