"""Where the probes go: a `System` built in this process, or a running overspill.

`InProcess` drives a built System as the shell would, minus HTTP: a client request goes
through `pipeline.handle` with its conversation id, a probe of a baseline through the model
layers only (as overspill's own calls do), and the background growth a turn asked for runs to
its end before the next turn (a client's next turn usually comes later than a growth takes).

`Remote` sends the same requests to a running overspill over HTTP: a baseline's probe with
`X-Overspill-Skip-History` (the server sends it as it is), a conversation's turns with
`X-Conversation-Id`; it sees a growth in the `x-overspill-messages-replaced` header.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import Any

import httpx

from evaluation.conditions import text_of
from evaluation.runner import Sent
from kernel.config import ModelEntry
from kernel.errors import ContextWindowExceeded, OverspillError, UpstreamError
from kernel.types import ChatRequest, Message, RequestContext
from proxy.system import System, completion_of

log = logging.getLogger("overspill.eval")

TENANT = "eval"
"""The tenant every in-process request of an evaluation runs as."""


class InProcess:
    """The model `model` of a built system."""

    def __init__(self, system: System, model: str) -> None:
        self.system = system
        self.model = model
        self.entry: ModelEntry = system.entries[model]

    async def ask(self, messages: Sequence[Message], *, max_tokens: int) -> str:
        """Through the model layers only, at temperature 0."""
        done = await self.system.internal(self.model)(messages, max_tokens=max_tokens)
        return done.text

    async def send(
        self, messages: Sequence[Message], conversation: str, *, play: bool, max_tokens: int
    ) -> Sent:
        """Through every layer; a turn's background growth is awaited, a probe's dropped."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": list(messages),
            "max_tokens": max_tokens,
            "temperature": 0,
        }
        request = ChatRequest(self.model, tuple(messages), False, body)
        ctx = RequestContext(
            request_id=f"eval-{uuid.uuid4().hex[:12]}",
            tenant=TENANT,
            model=self.entry,
            conversation_hint=conversation,
        )
        response = await self.system.pipeline.handle(request, ctx)
        text = completion_of(response).text
        if play:
            for name, job in ctx.after:
                try:
                    await job()
                except OverspillError:
                    log.exception("a background growth failed", extra={"job": name})
        replaced = int(ctx.notes.get("messages-replaced", 0))
        relevant = ctx.derived.get("relevant-turns")
        before = messages if play else messages[:-1]  # a probe: what came before its question
        shown, stand_in = await self._shown(before, conversation)
        if isinstance(relevant, str):  # the condensed turns quoted beside the question
            shown = f"{shown}\n\n{relevant}"
        return Sent(text, replaced, shown, stand_in)

    async def _shown(self, messages: Sequence[Message], conversation: str) -> tuple[str, str]:
        """The stored extraction and the messages after it (all of them, when none applies),
        and what made that extraction (`HistoryEntry.strategy`; "" when none applies)."""
        entry = await self.system.store.get(TENANT, conversation)
        if entry is None or entry.historical_end_index > len(messages):
            return text_of(messages), ""
        rest = text_of(messages[entry.historical_end_index :])
        return f"{entry.extraction}\n\n{rest}", entry.strategy


class Remote:
    """The model `model` behind a running overspill at `url`."""

    def __init__(self, client: httpx.AsyncClient, model: str, key: str | None) -> None:
        self.client = client
        self.model = model
        self.headers = {"authorization": f"Bearer {key}"} if key else {}

    async def ask(self, messages: Sequence[Message], *, max_tokens: int) -> str:
        """Sent as it is (the server's history layers skip it)."""
        headers = {**self.headers, "x-overspill-skip-history": "true"}
        text, _ = await self._post(messages, max_tokens, headers)
        return text

    async def send(
        self, messages: Sequence[Message], conversation: str, *, play: bool, max_tokens: int
    ) -> Sent:
        """As conversation `conversation`; the server runs its growths on its own schedule."""
        headers = {**self.headers, "x-conversation-id": conversation}
        text, replaced = await self._post(messages, max_tokens, headers)
        return Sent(text, replaced)

    async def _post(
        self, messages: Sequence[Message], max_tokens: int, headers: dict[str, str]
    ) -> tuple[str, int]:
        body = {"model": self.model, "messages": list(messages), "max_tokens": max_tokens,
                "temperature": 0}  # fmt: skip
        try:
            response = await self.client.post("/v1/chat/completions", json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise UpstreamError(f"cannot reach overspill: {exc}") from None
        if response.status_code != 200:
            error = _error_of(response)
            if error.get("code") == "context_length_exceeded":
                raise ContextWindowExceeded(str(error.get("message", response.text)))
            message = str(error.get("message", response.text[:300]))
            raise UpstreamError(f"overspill answered {response.status_code}: {message}")
        payload = response.json()
        content = ((payload.get("choices") or [{}])[0].get("message") or {}).get("content")
        replaced = int(response.headers.get("x-overspill-messages-replaced", "0") or 0)
        return (content if isinstance(content, str) else ""), replaced


def _error_of(response: httpx.Response) -> dict[str, Any]:
    """The OpenAI-style error object of a refusal (empty when the body is not one)."""
    try:
        payload = response.json()
    except ValueError:
        return {}
    error = payload.get("error") if isinstance(payload, dict) else None
    return error if isinstance(error, dict) else {}
