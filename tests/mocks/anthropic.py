"""A fast mock of Anthropic's Messages API, for benchmarks and end-to-end tests.

    python -m tests.mocks.anthropic --port 18020 [--chunks 20] [--chunk-delay-ms 0]

`POST /v1/messages` (any path ending in `/messages`) answers a Messages API JSON object, or,
when the body has `"stream": true`, Anthropic's event sequence: `message_start`,
`content_block_start`, `ping`, one `content_block_delta` (`text_delta`) per chunk,
`content_block_stop`, `message_delta` (stop_reason and usage), `message_stop`; each event is
`event: NAME\\ndata: {...}\\n\\n`, written as its own HTTP chunk. The text is
`tok0 tok1 ... tokN-1 `, as the gateway bench's mock writes it.

A model whose name starts with `overflow` gets Anthropic's real 400 for a prompt over the
window, one starting with `overloaded` a 529 `overloaded_error`, and one starting with `quota`
a 429 `rate_limit_error` on request tokens (error bodies for tests).

The HTTP side is `tests/mocks/serving.py`'s (raw asyncio, uvloop when installed): a few tens of
microseconds per request, so it is never what a benchmark measures.
"""

from __future__ import annotations

import orjson

from tests.mocks.serving import Json, main


def _event(name: str, payload: object) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


class Answers:
    """Anthropic's answers (only the model name varies per request)."""

    def __init__(self, chunks: int) -> None:
        self.pieces = [f"tok{i} " for i in range(chunks)]
        self.text = "".join(self.pieces)
        self.chunks = chunks

    def message(self, model: str) -> bytes:
        """A non-streaming Messages API answer."""
        return orjson.dumps(
            {
                "id": "msg_mock01",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [{"type": "text", "text": self.text}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 100, "output_tokens": self.chunks},
            }
        )

    def events(self, model: str) -> list[bytes]:
        """The SSE events of a streamed answer, one list item per HTTP chunk."""
        start: dict[str, object] = {
            "id": "msg_mock01", "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 100, "output_tokens": 1},
        }  # fmt: skip
        out = [
            _event("message_start", {"type": "message_start", "message": start}),
            _event(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
            ),
            _event("ping", {"type": "ping"}),
        ]
        for piece in self.pieces:
            delta = {"type": "text_delta", "text": piece}
            out.append(
                _event(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": 0, "delta": delta},
                )
            )
        out.append(_event("content_block_stop", {"type": "content_block_stop", "index": 0}))
        out.append(
            _event(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": self.chunks},
                },
            )
        )
        out.append(_event("message_stop", {"type": "message_stop"}))
        return out

    def reply(self, path: bytes, body: bytes) -> Json | list[bytes]:
        """A Messages answer, its events, or an error (the route, the JSON, the model's)."""
        if not path.split(b"?")[0].endswith(b"/messages"):
            return 404, _error("not_found_error", "no such route")
        try:
            request = orjson.loads(body)
        except orjson.JSONDecodeError:
            return 400, _error("invalid_request_error", "bad JSON")
        model = str(request.get("model") or "mock-model")
        failure = error_answer(model)
        if failure is not None:
            return failure
        if request.get("stream") is True:
            return self.events(model)
        return 200, self.message(model)


def error_answer(model: str) -> tuple[int, bytes] | None:
    """The error a model name asks for, if any (Anthropic's real status and body)."""
    if model.startswith("overflow"):
        kind, status = "invalid_request_error", 400
        message = "prompt is too long: 208310 tokens > 200000 maximum"
    elif model.startswith("overloaded"):
        kind, status, message = "overloaded_error", 529, "Overloaded"
    elif model.startswith("quota"):
        kind, status = "rate_limit_error", 429
        message = "Number of request tokens has exceeded your per-minute rate limit"
    else:
        return None
    return status, _error(kind, message)


def _error(kind: str, message: str) -> bytes:
    """Anthropic's error body."""
    return orjson.dumps({"type": "error", "error": {"type": kind, "message": message}})


if __name__ == "__main__":
    main("anthropic", __doc__ or "", 18020, Answers, "content_block_delta events")
