"""Two conversations that share a derived conversation id, through the real layers and a store."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kernel.conversation import DERIVED_PREFIX
from kernel.store import HistoryStore
from kernel.types import Completion, Message, RequestContext
from middleware.condensing.slots import slot_id
from middleware.layers.history_splice import HistorySplice
from middleware.layers.overflow_recovery import OverflowRecovery
from middleware.pipeline import compose
from tests.conftest import make_services, settings_from
from tests.middleware.layers.test_overflow_recovery import CONFIG, Upstream, chat

OPENING: list[dict[str, Any]] = [
    {"role": "system", "content": "You are the support assistant."},
    {"role": "user", "content": "Hello"},
]
TOPICS = ("alpha", "beta")


class TopicExtractor:
    """An extraction model that names the topics it read (so a cross-use shows)."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, messages: Sequence[Message], *, max_tokens: int) -> Completion:
        self.calls += 1
        prompt = " ".join(str(m.get("content")) for m in messages)
        seen = [topic for topic in TOPICS if f"about {topic}" in prompt]
        return Completion("Notes: " + ", ".join(seen), prompt_tokens=100, completion_tokens=10)


def turn(messages: list[dict[str, Any]], topic: str, index: int) -> list[dict[str, Any]]:
    """The conversation one turn longer: a reply, then a question about its topic."""
    return [
        *messages,
        {"role": "assistant", "content": f"reply {index} " + "word " * 60},
        {"role": "user", "content": f"question {index} about {topic} " + "word " * 60},
    ]


async def two_conversations_in_one_bucket(store: HistoryStore) -> None:
    """Alternate turns of two conversations that open identically; check what each got."""
    extractor = TopicExtractor()
    services = make_services(settings_from(CONFIG), store, lambda name: extractor, {"local": 2048})
    upstream = Upstream(fits=24)
    pipeline = compose([HistorySplice(services), OverflowRecovery(services)], upstream)
    model = settings_from(CONFIG).model_list[0]
    talks = {topic: [*OPENING] for topic in TOPICS}
    for index in range(14):
        for topic in TOPICS:
            talks[topic] = turn(talks[topic], topic, index)
    actions: dict[str, list[str]] = {topic: [] for topic in TOPICS}
    ids = set()
    for index in range(14, 20):
        for topic, other in (TOPICS, TOPICS[::-1]):
            talks[topic] = turn(talks[topic], topic, index)
            ctx = RequestContext("rid", "acme", model=model, opening=talks[topic])
            sent_before = len(upstream.sent)
            await pipeline(chat(talks[topic]), ctx)
            ids.add(ctx.conversation_id)
            actions[topic].append(ctx.notes.get("action", "sent"))
            for request in upstream.sent[sent_before:]:
                text = " ".join(str(m.get("content")) for m in request.messages)
                assert other not in text
    (bucket,) = ids
    assert bucket.startswith(DERIVED_PREFIX)
    for topic in TOPICS:
        assert actions[topic][0] == "spliced+extracted", actions  # compacted before the wall
        assert all(action.startswith("spliced") for action in actions[topic][1:]), actions
    for index, (topic, other) in enumerate((TOPICS, TOPICS[::-1])):
        entry = await store.get("acme", slot_id(bucket, index))  # alpha compacted first
        assert entry is not None
        assert f"about {topic}" in entry.extraction
        assert other not in entry.extraction
