"""A faithful fake Ollama server: the behaviour below was measured on a real Ollama.

Routes: `POST /api/show`, `GET /api/ps`, `GET /api/tags`, `POST /api/chat` (non-stream JSON, or
NDJSON: `done: false` chunks then a final `done: true` object carrying the counts; `stream`
defaults to true as in Ollama), plus `GET /_fake/stats` and `POST /_fake/reset` for tests.

The window of a chat is Ollama's: `options.num_ctx`, else the Modelfile `num_ctx`, else the
server default (`OLLAMA_CONTEXT_LENGTH`), capped at the trained context; the model then shows
in `/api/ps` loaded with it. A prompt longer than the window is SILENTLY truncated like Ollama's
`chatPrompt`: the oldest non-system messages are dropped (system messages and the last
message always kept), HTTP 200, `prompt_eval_count` counts what was kept. Still too long with
`shift: false` → 400 with Ollama's wording; with shift on → the first `num_keep` tokens and the
tail, half the window. `truncate: false` → 400 with llama-server's error as a string.

Token counting: with `forward` set (a llama-server root URL), the prompt is rendered with
llama-server's own chat template (`POST /apply-template`), counted with `POST /tokenize`, and
generated with `POST /completion` from the kept token ids: a real model behind Ollama's API.
Without it, a deterministic count: whitespace-separated words + 4 per message + 3 for the
reply (768 per image), and a fixed reply.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx
import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

SHIFT_OFF_ERROR = (
    "the prompt is longer than the context length currently available to the model; shorten "
    "the prompt, adjust the context length in settings, or use a model with a longer context "
    "length"
)
WORDS_PER_MESSAGE_OVERHEAD = 4
REPLY_PRIMING = 3
IMAGE_TOKENS = 768
NUM_KEEP = 4
CREATED_AT = "2026-01-01T00:00:00.000000Z"


@dataclass
class FakeModel:
    """One local model: its trained context, Modelfile num_ctx, and loaded context (if loaded)."""

    name: str = "smollm2:latest"
    trained_ctx: int = 8192
    modelfile_num_ctx: int | None = None
    loaded_ctx: int | None = None
    architecture: str = "llama"
    parameters: str = 'stop "<|im_start|>"\nstop "<|im_end|>"'

    def show(self) -> dict[str, Any]:
        """The `/api/show` answer."""
        extra = f"\nnum_ctx {self.modelfile_num_ctx}" if self.modelfile_num_ctx else ""
        return {
            "license": "Apache-2.0",
            "modelfile": f"FROM {self.name}",
            "parameters": self.parameters + extra,
            "template": "{{ .Prompt }}",
            "details": self.details(),
            "model_info": {
                "general.architecture": self.architecture,
                "general.parameter_count": 134515008,
                f"{self.architecture}.context_length": self.trained_ctx,
                f"{self.architecture}.embedding_length": 576,
            },
            "capabilities": ["completion"],
            "modified_at": CREATED_AT,
        }

    def details(self) -> dict[str, Any]:
        """The `details` object Ollama attaches to a model."""
        return {
            "parent_model": "",
            "format": "gguf",
            "family": self.architecture,
            "families": [self.architecture],
            "parameter_size": "134.52M",
            "quantization_level": "Q4_1",
        }


@dataclass
class ChatRecord:
    """What the fake did with one `/api/chat` request."""

    model: str
    options: dict[str, Any]
    num_ctx: int
    prompt_tokens: int
    prompt_eval_count: int
    dropped_messages: int
    shifted: bool
    status: int
    stream: bool
    truncate: bool = True


@dataclass
class Prompt:
    """The prompt after Ollama's truncation, ready for generation."""

    messages: list[dict[str, Any]]
    tokens: int
    ids: list[int] = field(default_factory=list)


class FakeOllama:
    """The fake server; `app` is the ASGI app, `records` what each chat did."""

    def __init__(
        self,
        models: Sequence[FakeModel] = (),
        *,
        server_default: int = 4096,
        forward: str | None = None,
        reply: str = "Hello from the fake Ollama.",
    ) -> None:
        self.models = {m.name: m for m in models or (FakeModel(),)}
        self.server_default = server_default
        self.forward = forward.rstrip("/") if forward else None
        self.reply = reply
        self.records: list[ChatRecord] = []
        self.counting = "llama-server /tokenize" if forward else "words"
        self._client: httpx.AsyncClient | None = None
        self.app = Starlette(
            routes=[
                Route("/", self._root, methods=["GET"]),
                Route("/api/version", self._version, methods=["GET"]),
                Route("/api/show", self._show, methods=["POST"]),
                Route("/api/ps", self._ps, methods=["GET"]),
                Route("/api/tags", self._tags, methods=["GET"]),
                Route("/api/chat", self._chat, methods=["POST"]),
                Route("/_fake/stats", self._stats, methods=["GET"]),
                Route("/_fake/reset", self._reset, methods=["POST"]),
            ],
            lifespan=self._lifespan,
        )

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        yield
        await self.aclose()

    def stats(self) -> dict[str, Any]:
        """Counts of what happened, and every chat record."""
        return {
            "counting": self.counting,
            "chats": len(self.records),
            "truncated": sum(1 for r in self.records if r.dropped_messages or r.shifted),
            "shifted": sum(1 for r in self.records if r.shifted),
            "errors": sum(1 for r in self.records if r.status != 200),
            "requests": [asdict(r) for r in self.records],
        }

    def model(self, name: str) -> FakeModel | None:
        """A local model by name (`smollm2` finds `smollm2:latest`)."""
        return self.models.get(name if ":" in name else f"{name}:latest")

    def window(self, model: FakeModel, options: Mapping[str, Any]) -> int:
        """The window Ollama runs a chat with (options, Modelfile, server default; trained cap)."""
        asked = options.get("num_ctx") or model.modelfile_num_ctx or self.server_default
        return min(int(asked), model.trained_ctx)

    async def _root(self, request: Request) -> Response:
        return Response("Ollama is running")

    async def _version(self, request: Request) -> Response:
        return _json({"version": "0.13.5"})

    async def _show(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        name = str(body.get("model") or body.get("name") or "")
        model = self.model(name)
        if model is None:
            return _json({"error": f"model '{name}' not found"}, 404)
        return _json(model.show())

    async def _ps(self, request: Request) -> Response:
        loaded = [
            {
                "name": m.name, "model": m.name, "size": 200_000_000, "digest": "0" * 64,
                "details": m.details(), "expires_at": CREATED_AT, "size_vram": 0,
                "context_length": m.loaded_ctx,
            }
            for m in self.models.values()
            if m.loaded_ctx is not None
        ]  # fmt: skip
        return _json({"models": loaded})

    async def _tags(self, request: Request) -> Response:
        models = [
            {
                "name": m.name, "model": m.name, "modified_at": CREATED_AT, "size": 98_362_432,
                "digest": "0" * 64, "details": m.details(),
            }
            for m in self.models.values()
        ]  # fmt: skip
        return _json({"models": models})

    async def _stats(self, request: Request) -> Response:
        return _json(self.stats())

    async def _reset(self, request: Request) -> Response:
        self.records.clear()
        return _json({"ok": True})

    async def _chat(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        name = str(body.get("model", ""))
        model = self.model(name)
        if model is None:
            return _json({"error": f'model "{name}" not found, try pulling it first'}, 404)
        options = body.get("options") or {}
        stream = body.get("stream", True) is not False
        truncate = body.get("truncate", True) is not False
        shift = body.get("shift", True) is not False
        num_ctx = self.window(model, options)
        model.loaded_ctx = num_ctx
        messages = list(body.get("messages") or [])
        full = await self._count(messages)
        record = ChatRecord(
            name, dict(options), num_ctx, full, full, 0, False, 200, stream, truncate
        )
        self.records.append(record)
        prompt = await self._fit(messages, full, num_ctx, truncate)
        record.dropped_messages = len(messages) - len(prompt.messages)
        if prompt.tokens > num_ctx:
            if not truncate:
                record.status = 400
                return _json({"error": _llama_overflow(prompt.tokens, num_ctx)}, 400)
            if not shift:
                record.status = 400
                return _json({"error": SHIFT_OFF_ERROR}, 400)
            prompt = self._shift(prompt, num_ctx)
            record.shifted = True
        record.prompt_eval_count = prompt.tokens
        return await self._generate(name, prompt, options, stream, record)

    async def _fit(
        self, messages: list[dict[str, Any]], full: int, num_ctx: int, truncate: bool
    ) -> Prompt:
        """Ollama's chatPrompt: keep the newest messages that fit, plus every system message."""
        if full <= num_ctx or not truncate or len(messages) < 2:
            return await self._prompt(messages, full)
        low, high = 1, len(messages) - 1  # smallest start that fits; the last message stays
        while low < high:
            middle = (low + high) // 2
            if await self._count(_from(messages, middle)) <= num_ctx:
                high = middle
            else:
                low = middle + 1
        kept = _from(messages, low)
        return await self._prompt(kept, await self._count(kept))

    def _shift(self, prompt: Prompt, num_ctx: int) -> Prompt:
        """The runner's cut: the first num_keep tokens and the tail, half the window in all."""
        keep = num_ctx // 2
        ids = prompt.ids[:NUM_KEEP] + prompt.ids[-(keep - NUM_KEEP) :] if prompt.ids else []
        return Prompt(prompt.messages, keep, ids)

    async def _count(self, messages: Sequence[Mapping[str, Any]]) -> int:
        if self.forward is None:
            return REPLY_PRIMING + sum(_words(m) for m in messages)
        return len(await self._tokenize(messages))

    async def _prompt(self, messages: list[dict[str, Any]], tokens: int) -> Prompt:
        ids = await self._tokenize(messages) if self.forward else []
        return Prompt(messages, tokens, ids)

    async def _tokenize(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        client = self._http()
        rendered = await client.post(
            f"{self.forward}/apply-template", json={"messages": list(messages)}
        )
        rendered.raise_for_status()
        tokens = await client.post(
            f"{self.forward}/tokenize", json={"content": rendered.json()["prompt"]}
        )
        tokens.raise_for_status()
        return list(tokens.json()["tokens"])

    async def _generate(
        self,
        name: str,
        prompt: Prompt,
        options: Mapping[str, Any],
        stream: bool,
        record: ChatRecord,
    ) -> Response:
        limit = options.get("num_predict")
        if self.forward is None:
            words = self.reply.split(" ")
            cut = words[:limit] if isinstance(limit, int) and limit >= 0 else words
            text, done_reason, evals = " ".join(cut), "length" if cut != words else "stop", len(cut)
        else:
            answer = await self._completion(prompt.ids, options)
            if isinstance(answer, Response):
                record.status = answer.status_code
                return answer
            text, done_reason, evals = answer
        final = {
            "model": name, "created_at": CREATED_AT,
            "message": {"role": "assistant", "content": "" if stream else text},
            "done": True, "done_reason": done_reason, "total_duration": 1_000_000,
            "load_duration": 1000, "prompt_eval_count": prompt.tokens,
            "prompt_eval_duration": 1000, "eval_count": evals, "eval_duration": 1000,
        }  # fmt: skip
        if not stream:
            return _json(final)
        return StreamingResponse(_ndjson(name, text, final), media_type="application/x-ndjson")

    async def _completion(
        self, ids: list[int], options: Mapping[str, Any]
    ) -> tuple[str, str, int] | Response:
        """Generate with llama-server from token ids; its error becomes Ollama's 400 string."""
        wanted = {"temperature", "top_p", "top_k", "seed", "stop", "repeat_penalty"}
        body = {k: v for k, v in options.items() if k in wanted}
        body.update(prompt=ids, n_predict=options.get("num_predict", -1), cache_prompt=True)
        answer = await self._http().post(f"{self.forward}/completion", json=body)
        if answer.status_code != 200:
            return _json({"error": answer.text}, answer.status_code)
        data = answer.json()
        reason = "length" if data.get("stop_type") == "limit" else "stop"
        return str(data.get("content", "")), reason, int(data.get("tokens_predicted", 0))

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=300)
        return self._client

    async def aclose(self) -> None:
        """Close the forwarding client."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _from(messages: Sequence[dict[str, Any]], start: int) -> list[dict[str, Any]]:
    """Ollama's candidate prompt: the system messages before `start`, then messages[start:]."""
    return [m for m in messages[:start] if m.get("role") == "system"] + list(messages[start:])


def _words(message: Mapping[str, Any]) -> int:
    content = message.get("content")
    text = content if isinstance(content, str) else ""
    images = message.get("images")
    count = len(images) if isinstance(images, list) else 0
    return len(text.split()) + WORDS_PER_MESSAGE_OVERHEAD + IMAGE_TOKENS * count


def _llama_overflow(tokens: int, num_ctx: int) -> str:
    """llama-server's overflow error, as the string Ollama wraps in `{"error": ...}`."""
    return orjson.dumps(
        {
            "error": {
                "code": 400,
                "message": f"request ({tokens} tokens) exceeds the available context size "
                f"({num_ctx} tokens), try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": tokens,
                "n_ctx": num_ctx,
            }
        }
    ).decode()


async def _ndjson(name: str, text: str, final: Mapping[str, Any]) -> AsyncIterator[bytes]:
    for index, word in enumerate(text.split(" ") if text else []):
        piece = word if index == 0 else " " + word
        chunk = {
            "model": name,
            "created_at": CREATED_AT,
            "message": {"role": "assistant", "content": piece},
            "done": False,
        }
        yield orjson.dumps(chunk) + b"\n"
    yield orjson.dumps(final) + b"\n"


def _json(body: object, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status, media_type="application/json; charset=utf-8")


@contextlib.contextmanager
def serve_in_thread(fake: FakeOllama) -> Iterator[str]:
    """Run the fake under uvicorn in a thread, on a loopback socket bound here to a port the
    system chooses (no port to lose between choosing and binding it); yields its root URL."""
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    port = int(listening.getsockname()[1])
    config = uvicorn.Config(fake.app, lifespan="on", ws="none", log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [listening]}, name="fake-ollama", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the fake Ollama did not start")
        time.sleep(0.05)  # polling a starting server, not a test sleep
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        listening.close()
