"""Which of overspill's API routes a model serves, by its mode (LiteLLM's `model_info.mode`).

A deployment's mode says what kind of model it is: `chat`, `embedding`, `completion`,
`responses`, `image_generation`, ... (LiteLLM's values). overspill reads it to refuse early,
with a 400 that names the routes the model does serve, a request the model cannot answer (an
embedding model asked for a chat completion), and to list each model's routes on `/v1/models`.
A model whose mode nobody knows is asked whatever the client asks: the upstream decides.

An API is named as its surface is (proxy/surfaces/): `chat`, `responses`, `messages`,
`completions`, `embeddings`; the conversation APIs (chat, responses, Anthropic's messages) all
reach the same conversation core and so the same chat models.
"""

from __future__ import annotations

from collections.abc import Mapping

API_ROUTES: Mapping[str, str] = {
    "chat": "/v1/chat/completions",
    "responses": "/v1/responses",
    "messages": "/v1/messages",
    "completions": "/v1/completions",
    "embeddings": "/v1/embeddings",
}
"""Each API overspill serves to models, and its route (also served without `/v1`)."""

CONVERSATION_APIS = frozenset({"chat", "responses", "responses.compact", "messages"})
"""The APIs whose requests are conversations: the layers run them on a chat model (a
Responses conversation's compaction is one too)."""

_CONVERSATION_MODEL = CONVERSATION_APIS | {"completions"}
"""A chat model's: the conversations, and legacy completions, which self-hosted servers
(llama.cpp, vLLM, Ollama) answer from a chat model (the upstream decides)."""

_OTHER_MODES = (
    "image_generation", "image_edit", "audio_transcription", "audio_speech", "moderation",
    "rerank", "video_generation", "realtime", "search", "ocr", "evaluation", "extraction",
    "guardrail", "vector_store", "batch",
)  # fmt: skip

MODE_APIS: Mapping[str, frozenset[str]] = {
    "chat": _CONVERSATION_MODEL,
    "responses": _CONVERSATION_MODEL,
    "completion": frozenset({"completions"}),
    "embedding": frozenset({"embeddings"}),
    **dict.fromkeys(_OTHER_MODES, frozenset()),
}
"""LiteLLM's modes and the APIs of overspill each serves (the others serve none of them)."""


def mode_problem(mode: object) -> str | None:
    """Why a configured `model_info.mode` cannot be used, or None when it can (or is unset)."""
    if mode is None or (isinstance(mode, str) and mode in MODE_APIS):
        return None
    return f"{mode!r} is not one of LiteLLM's modes: expected one of {', '.join(MODE_APIS)}"


def apis_of(mode: str | None) -> frozenset[str] | None:
    """The APIs a model of `mode` serves; None when the mode is unknown (the upstream decides)."""
    return MODE_APIS.get(mode) if mode is not None else None
