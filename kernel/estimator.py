"""The one token estimator every layer shares: counts, calibrated estimates, and learning.

Counting is tiktoken's (kernel/tokens.py): exact for OpenAI models, an estimate for others.
Each model's message counts are cached once for the whole process (a long conversation is
resent whole on every turn, so only new messages are tokenized). The correction between our
count and the upstream's own (`usage.prompt_tokens`) is learned per configured model name
from samples kept in the store (kernel/calibration.py), so replicas and restarts agree. A
sample within `calibration.TOLERANCE` of the correction this process last read for the model
is not written: it would not move the estimate, and a store write each request is the
costliest part of a turn that needs no other help.

A store that cannot be read or written never fails a request: the estimate goes uncorrected
and the failure is logged.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol

import orjson

from kernel import calibration
from kernel.config import ModelEntry
from kernel.store import StoreError
from kernel.tokens import TokenCounter
from kernel.types import Message

log = logging.getLogger("overspill.estimator")

TOOL_SETS = 256
"""Distinct tool definitions whose counts the estimator keeps."""


class CalibrationLog(Protocol):
    """Where a model's calibration samples live (the history store implements it)."""

    async def calibration(self, model: str) -> tuple[float, ...]:
        """The model's samples, newest first."""
        ...

    async def add_calibration(self, model: str, ratio: float) -> None:
        """Record one sample."""
        ...


class Estimator:
    """Token counts per model and their learned correction, shared by every layer."""

    def __init__(self, log: CalibrationLog) -> None:
        self.log = log
        self._counters: dict[str, TokenCounter] = {}
        self._read: dict[str, float] = {}
        """Per model name, the correction last read from the store (dropped by a write)."""
        self._tools: OrderedDict[tuple[str, bytes], int] = OrderedDict()
        """Tool definitions' counts by tokenizer and content digest (the newest `TOOL_SETS`)."""

    def counter(self, entry: ModelEntry) -> TokenCounter:
        """The cached per-message counter for a deployment's model (its tokenizer)."""
        model = entry.litellm_params.upstream_model
        counter = self._counters.get(model)
        if counter is None:
            counter = self._counters[model] = TokenCounter(model)
        return counter

    def counts(self, entry: ModelEntry, messages: Sequence[Message]) -> tuple[int, ...]:
        """Each message's raw token count."""
        count = self.counter(entry).count_message
        return tuple(count(message) for message in messages)

    def count(self, entry: ModelEntry, messages: Sequence[Message], tools: object = None) -> int:
        """A prompt's raw token count (messages plus the reply's priming, and the request's
        tool definitions when given)."""
        return self.counter(entry).count_messages(messages) + self.count_tools(entry, tools)

    def count_text(self, entry: ModelEntry, text: str) -> int:
        """A text's raw token count."""
        return self.counter(entry).count_text(text)

    def count_tools(self, entry: ModelEntry, tools: object) -> int:
        """The raw tokens a request's tool definitions add to its prompt (their JSON counted as
        text; 0 without tools). An agent sends the same tools every turn: a count is kept by
        content, so a turn pays a digest, not a tokenization."""
        if not tools:
            return 0
        try:
            written = orjson.dumps(tools)
        except orjson.JSONEncodeError:
            return 0
        model = entry.litellm_params.upstream_model
        key = (model, hashlib.blake2b(written, digest_size=16).digest())
        found = self._tools.get(key)
        if found is None:
            found = self._tools[key] = self.counter(entry).count_text(written.decode())
            if len(self._tools) > TOOL_SETS:
                self._tools.popitem(last=False)
        return found

    async def scale(self, entry: ModelEntry) -> float:
        """The model's correction: upstream tokens per counted token (1.0 until learned)."""
        try:
            samples = await self.log.calibration(entry.model_name)
        except StoreError as exc:
            log.error("calibration unavailable; estimates uncorrected", extra={"error": str(exc)})
            return 1.0
        found = self._read[entry.model_name] = calibration.ratio(samples)
        return found

    async def observe(self, entry: ModelEntry, counted: int, reported: int | None) -> None:
        """Learn from the upstream's count of a prompt we counted `counted` raw tokens for."""
        found = calibration.sample(counted, reported)
        if found is None:
            return
        current = self._read.get(entry.model_name)
        if current is not None and not calibration.teaches(found, current):
            return
        self._read.pop(entry.model_name, None)  # the write changes it: unknown until read
        try:
            await self.log.add_calibration(entry.model_name, found)
        except StoreError as exc:
            log.error("calibration sample not recorded", extra={"error": str(exc)})
