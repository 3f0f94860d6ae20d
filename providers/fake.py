"""A scripted provider: answers from a list of steps, for tests and demos (never a real model).

Each step is a response, an exception to raise, or a function of the request that returns a
response. Every request it receives is recorded: conversations (`complete`) in `requests`,
embeddings and legacy completions (`send`) in `sent`; both play the same steps in turn.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any

import orjson

from kernel.types import ChatRequest, ChatResponse, RequestContext, RouteRequest

Step = ChatResponse | BaseException | Callable[[Any], ChatResponse]
"""A response, an exception, or a function of the request (a ChatRequest for `complete`, a
RouteRequest for `send`) that returns one."""


class ScriptedProvider:
    """Plays its steps in order (the last one repeats)."""

    def __init__(self, steps: Sequence[Step], name: str = "fake") -> None:
        if not steps:
            raise ValueError("a scripted provider needs at least one step")
        self.name = name
        self.steps = list(steps)
        self.requests: list[ChatRequest] = []
        self.sent: list[RouteRequest] = []
        self.closed = False

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        """Record the request and play the next step."""
        self.requests.append(request)
        return self._play(request)

    async def send(self, request: RouteRequest, ctx: RequestContext) -> ChatResponse:
        """Record the embeddings or completions request and play the next step."""
        self.sent.append(request)
        return self._play(request)

    def _play(self, request: ChatRequest | RouteRequest) -> ChatResponse:
        calls = len(self.requests) + len(self.sent)
        step = self.steps[min(calls, len(self.steps)) - 1]
        if isinstance(step, BaseException):
            raise step
        if callable(step):
            return step(request)
        return step

    async def aclose(self) -> None:
        """Remember that it was closed."""
        self.closed = True


def completion(content: str, model: str = "fake-model", **usage: int) -> dict[str, Any]:
    """An OpenAI chat.completion object."""
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": usage.get("prompt_tokens", 10),
            "completion_tokens": usage.get("completion_tokens", 2),
            "total_tokens": usage.get("prompt_tokens", 10) + usage.get("completion_tokens", 2),
        },
    }


def embeddings(vectors: Sequence[Sequence[float]], model: str = "fake-embed") -> dict[str, Any]:
    """An OpenAI embeddings list, one item per vector."""
    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": index, "embedding": list(vector)}
            for index, vector in enumerate(vectors)
        ],
        "model": model,
        "usage": {"prompt_tokens": 3 * len(vectors), "total_tokens": 3 * len(vectors)},
    }


def text_completion(text: str, model: str = "fake-model") -> dict[str, Any]:
    """An OpenAI legacy text_completion object."""
    return {
        "id": "cmpl-fake",
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }


def json_response(content: str, *, prompt_tokens: int = 10) -> ChatResponse:
    """A non-stream response carrying `content`."""
    return ChatResponse(body=orjson.dumps(completion(content, prompt_tokens=prompt_tokens)))


def sse_events(pieces: Iterable[str], model: str = "fake-model") -> list[bytes]:
    """The SSE events of a streamed answer made of `pieces`, ending with [DONE]."""
    events = []
    for piece in pieces:
        chunk = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}],
        }
        events.append(b"data: " + orjson.dumps(chunk) + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return events


def stream_response(
    events: Sequence[bytes], error: BaseException | None = None
) -> Callable[[ChatRequest], ChatResponse]:
    """A step that streams `events`, then raises `error` if given (a mid-stream failure)."""

    def step(request: ChatRequest) -> ChatResponse:
        async def generate() -> AsyncIterator[bytes]:
            for event in events:
                yield event
            if error is not None:
                raise error

        return ChatResponse(stream=generate())

    return step
