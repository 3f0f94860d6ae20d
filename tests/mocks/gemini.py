"""A fast mock of Google AI Studio's Gemini API, for benchmarks and end-to-end tests.

    python -m tests.mocks.gemini --port 18021 [--chunks 20] [--chunk-delay-ms 0]

`POST .../models/MODEL:generateContent` answers a GenerateContentResponse, and
`POST .../models/MODEL:streamGenerateContent?alt=sse` a stream of them: one per chunk, each
`data: {...}\\r\\n\\r\\n` written as its own HTTP chunk, the last with `finishReason: STOP`
and the usage. The text is `tok0 tok1 ... tokN-1 `, as the other mocks write it.

A model whose name starts with `overflow` gets Gemini's real 400 INVALID_ARGUMENT for a prompt
over the window, and one starting with `quota` a 429 RESOURCE_EXHAUSTED naming an input-token
quota (error bodies for tests). The HTTP side is `tests/mocks/serving.py`'s.
"""

from __future__ import annotations

import re

import orjson

from tests.mocks.serving import Json, main

_CALL = re.compile(rb"/models/([^/:?]+):(generateContent|streamGenerateContent)")


class Answers:
    """Gemini's answers (only the model name varies per request)."""

    def __init__(self, chunks: int) -> None:
        self.pieces = [f"tok{i} " for i in range(chunks)]
        self.chunks = chunks

    def response(self, model: str, text: str, last: bool) -> dict[str, object]:
        """One GenerateContentResponse (`last`: with the finish reason and all the usage)."""
        candidate: dict[str, object] = {"content": {"role": "model", "parts": [{"text": text}]}}
        usage = {"promptTokenCount": 100, "totalTokenCount": 100}
        if last:
            candidate["finishReason"] = "STOP"
            usage = {
                "promptTokenCount": 100,
                "candidatesTokenCount": self.chunks,
                "totalTokenCount": 100 + self.chunks,
            }
        return {
            "candidates": [candidate],
            "usageMetadata": usage,
            "modelVersion": model,
            "responseId": "mock-response-1",
        }

    def events(self, model: str) -> list[bytes]:
        """The stream: a response per piece, the last one finishing."""
        count = len(self.pieces)
        return [
            b"data: " + orjson.dumps(self.response(model, piece, i == count - 1)) + b"\r\n\r\n"
            for i, piece in enumerate(self.pieces)
        ]

    def reply(self, path: bytes, body: bytes) -> Json | list[bytes]:
        """An answer, its stream, or an error (the route, the JSON, the model's)."""
        found = _CALL.search(path)
        if found is None:
            return 404, _error(404, "NOT_FOUND", "no such route")
        try:
            orjson.loads(body)
        except orjson.JSONDecodeError:
            return 400, _error(400, "INVALID_ARGUMENT", "bad JSON")
        model = found.group(1).decode()
        failure = error_answer(model)
        if failure is not None:
            return failure
        if found.group(2) == b"streamGenerateContent":
            return self.events(model)
        return 200, orjson.dumps(self.response(model, "".join(self.pieces), True))


def error_answer(model: str) -> tuple[int, bytes] | None:
    """The error a model name asks for, if any (Gemini's real status and body)."""
    if model.startswith("overflow"):
        message = (
            "The input token count (1201336) exceeds the maximum number of tokens allowed "
            "(1048576)."
        )
        return 400, _error(400, "INVALID_ARGUMENT", message)
    if model.startswith("quota"):
        message = (
            "You exceeded your current quota, please check your plan and billing details. "
            "Quota exceeded for metric: "
            "generativelanguage.googleapis.com/generate_content_paid_tier_input_token_count, "
            "limit: 1000000"
        )
        return 429, _error(429, "RESOURCE_EXHAUSTED", message)
    return None


def _error(code: int, status: str, message: str) -> bytes:
    """Google's error body."""
    return orjson.dumps({"error": {"code": code, "message": message, "status": status}})


if __name__ == "__main__":
    main("gemini", __doc__ or "", 18021, Answers, "streamed responses")
