"""The request bodies the load generator sends: deterministic, one file per (shape, size, stream).

A conversation of `messages` turns of about `chars` characters each (a system prompt, then
user and assistant alternating), words drawn by a seeded generator from a list with some
non-ASCII ones, so every run and every machine sends the same bytes. `small` is 10 messages
(~2.2 KB), `large` 200 (~213 KB). Each shape writes that conversation as one API's request.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import orjson

SIZES = {"small": (10, 170, 42), "large": (200, 980, 43)}
"""Size name: (messages, characters per message, seed)."""

_WORDS = (
    "a an the of to in on for with from into over under about after before while because "
    "request response stream token budget window context history summary upstream model "
    "proxy gateway latency cache store layer chunk reply answer question function value "
    "config deploy server client worker tenant metric trace error retry limit offset "
    "déjà naïve façade crème 東京 데이터 ελληνικά über"
)
_WORD_LIST = _WORDS.split()


def _text(rng: random.Random, chars: int) -> str:
    words: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(_WORD_LIST)
        words.append(word)
        size += len(word) + 1
    return " ".join(words)


def conversation(size: str) -> list[dict[str, str]]:
    """The turns of a body of this size, system prompt first."""
    count, chars, seed = SIZES[size]
    rng = random.Random(seed)
    turns = [{"role": "system", "content": "You are a careful assistant. " + _text(rng, chars)}]
    for i in range(count - 1):
        turns.append({"role": "user" if i % 2 == 0 else "assistant", "content": _text(rng, chars)})
    return turns


def _chat(turns: list[dict[str, str]], model: str, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": turns, "temperature": 0.7}
    return {**body, "max_tokens": 256, "stream": stream}


def _messages(turns: list[dict[str, str]], model: str, stream: bool) -> dict[str, Any]:
    system, rest = turns[0]["content"], turns[1:]
    body = {"model": model, "system": system, "messages": rest, "max_tokens": 256}
    return {**body, "temperature": 0.7, "stream": stream}


def _responses(turns: list[dict[str, str]], model: str, stream: bool) -> dict[str, Any]:
    instructions, rest = turns[0]["content"], turns[1:]
    body = {"model": model, "instructions": instructions, "input": rest}
    return {**body, "max_output_tokens": 256, "temperature": 0.7, "stream": stream}


def _completions(turns: list[dict[str, str]], model: str, stream: bool) -> dict[str, Any]:
    prompt = "\n\n".join(f"{turn['role']}: {turn['content']}" for turn in turns)
    return {"model": model, "prompt": prompt, "max_tokens": 256, "stream": stream}


def _embeddings(turns: list[dict[str, str]], model: str, _stream: bool) -> dict[str, Any]:
    return {"model": model, "input": [turn["content"] for turn in turns]}


SHAPES: dict[str, Callable[[list[dict[str, str]], str, bool], dict[str, Any]]] = {
    "chat": _chat,
    "messages": _messages,
    "responses": _responses,
    "completions": _completions,
    "embeddings": _embeddings,
}
"""Shape name: the request body of one API (Chat Completions, Anthropic Messages, ...)."""


def body(shape: str, size: str, model: str, stream: bool) -> bytes:
    """The bytes of one request body."""
    return orjson.dumps(SHAPES[shape](conversation(size), model, stream))
