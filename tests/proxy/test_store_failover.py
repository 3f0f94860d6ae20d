"""Two real `overspill serve` processes sharing a Redis Cluster or a Sentinel set under a write
load of long conversations (a scripted upstream); the primary that serves a conversation is
killed mid-load. No request fails, every stored record is whole, no conversation is extracted
twice at once, and the time until each process used the store again is printed."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import orjson
import pytest
import redis

from kernel.records import decode
from kernel.redis_keys import CLUSTER_BUCKETS, KeyLayout
from tests.e2e.conftest import MASTER_KEY, start_overspill, stop
from tests.redis_ha import ClusterSet, Deployment
from tests.scripted_chats import ScriptedChats, history, model_list, running

pytestmark = pytest.mark.reliability("store")

CONVERSATIONS = 6
TURNS = 40
KILL_AFTER_TURN = 21
"""The turn of the first conversation after which its primary is killed, once its extraction
is in the store: compaction starts around turn 15 (the growth runs after the answer, so on a
loaded box it may land a turn or two later), and it grows twice more after the kill."""
BOTH_AT_ONCE = 4
"""Every fourth turn goes to both processes at once (the same conversation, the same turn)."""
REQUEST_TIMEOUT = 120.0


@dataclass(frozen=True)
class Answer:
    """One request's outcome."""

    conversation: str
    turn: int
    status: int
    action: str
    sent_at: float
    done_at: float


def config(upstream: str, url: str, prefix: str) -> str:
    """Two processes' config: the scripted model with its window known, extracted by a model
    whose window holds the whole history (one call per extraction), the default layers, the
    deployment as the store (a short pause after a failed call, so that the new primary is used
    soon; a killed primary refuses connections at once, whatever the timeout)."""
    return f"""{model_list(upstream)}general_settings:
  master_key: {MASTER_KEY}
  store:
    backend: redis
    url: "{url}"
    key_prefix: "{prefix}"
    timeout_seconds: 2
    retry_after_seconds: 0.5
"""


@pytest.fixture(params=["cluster", "sentinel"])
def deployment(request: pytest.FixtureRequest) -> Deployment:
    """A cluster or Sentinel set of this test's own (one of its primaries gets killed)."""
    found: Deployment = request.getfixturevalue(f"own_{request.param}")
    return found


@pytest.fixture
def upstream() -> Iterator[tuple[str, ScriptedChats]]:
    """The scripted upstream (window 2048, extractions take 0.1 s)."""
    with running(window=2048, extraction_seconds=0.1) as found:
        yield found


@dataclass(frozen=True)
class Kill:
    """When a primary was killed (time.time()), and the conversations whose keys it served."""

    at: float
    conversations: frozenset[str]


def test_a_primary_killed_under_load_loses_no_request_and_no_record(
    deployment: Deployment, upstream: tuple[str, ScriptedChats], tmp_path: Path
) -> None:
    """Kill the primary serving a conversation while two processes serve six long
    conversations: every request answers 200, every record is whole, no conversation's
    extractions overlap, and the killed primary's conversations are spliced from the store
    again (the times are printed)."""
    base, scripted = upstream
    prefix = f"failover-{secrets.token_hex(3)}:"
    text = config(base, deployment.url, prefix)
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
    started = [start_overspill(text, tmp_path / name) for name in ("first", "second")]
    try:
        urls = [url for _, url, _ in started]
        answers, kill = asyncio.run(load(urls, deployment, prefix))
    finally:
        for process, _, _ in started:
            stop(process)
    failed = [a for a in answers if a.status != 200]
    assert not failed, failed
    assert len(answers) == CONVERSATIONS * (TURNS + TURNS // BOTH_AT_ONCE)
    overlapping = scripted.stats.overlapping()
    assert overlapping == {}, (kill, overlapping)
    assert scripted.stats.extractions > 0
    assert_every_record_whole(deployment, prefix)
    logs = [log.read_text() for _, _, log in started]
    assert not any("corrupt history record" in log for log in logs)
    assert not any("proceeding without it" in log for log in logs)
    spliced = [
        a for a in answers
        if a.conversation in kill.conversations and a.sent_at > kill.at and a.action == "spliced"
    ]  # fmt: skip
    assert spliced, "no conversation of the killed primary was spliced from the store again"
    first = min(spliced, key=lambda a: a.done_at)
    print(
        f"\n{type(deployment).__name__}: a conversation of the killed primary was spliced from "
        f"the store again {first.done_at - kill.at:.1f} s after the kill"
    )
    for name, log in zip(("first", "second"), logs, strict=True):
        print(f"{name} process: {recovery(log, kill.at)}")
    stats = scripted.stats
    print(f"upstream: {stats.requests} requests, {stats.extractions} extraction calls, "
          f"{stats.overflows} overflows refused")  # fmt: skip


async def load(urls: list[str], deployment: Deployment, prefix: str) -> tuple[list[Answer], Kill]:
    """Run the conversations (turns alternate between the processes; every BOTH_AT_ONCE-th
    turn goes to both at once); kill the primary of the first conversation's keys after its
    KILL_AFTER_TURN-th turn."""
    answers: list[Answer] = []
    kills: list[Kill] = []
    kill = asyncio.Event()
    names = [f"c{i}" for i in range(CONVERSATIONS)]

    async def converse(client: httpx.AsyncClient, conversation: str) -> None:
        for index in range(TURNS):
            messages = history(conversation, index)
            both = index % BOTH_AT_ONCE == BOTH_AT_ONCE - 1
            targets = urls if both else [urls[index % 2]]
            asked = [ask(client, url, conversation, index, messages) for url in targets]
            answers.extend(await asyncio.gather(*asked))
            if conversation == names[0] and index == KILL_AFTER_TURN:
                kill.set()

    async def killer() -> None:
        await kill.wait()
        deadline = time.monotonic() + REQUEST_TIMEOUT
        while (
            primaries := await asyncio.to_thread(primaries_of, deployment, prefix, names)
        ) is None:
            assert time.monotonic() < deadline, f"nothing stored for {names[0]} in time"
            await asyncio.sleep(0.05)  # polling the store for a background growth, not a test sleep
        killed = primaries[names[0]]
        kills.append(Kill(time.time(), frozenset(c for c, p in primaries.items() if p == killed)))
        deployment.kill(killed)

    limits = httpx.Limits(max_connections=4 * CONVERSATIONS)
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT, limits=limits) as client:
        await asyncio.gather(killer(), *(converse(client, name) for name in names))
    return answers, kills[0]


async def ask(
    client: httpx.AsyncClient,
    url: str,
    conversation: str,
    index: int,
    messages: list[dict[str, str]],
) -> Answer:
    """One chat request, as a client that sends its conversation id."""
    sent_at = time.time()
    response = await client.post(
        f"{url}/v1/chat/completions",
        headers={"authorization": f"Bearer {MASTER_KEY}", "x-conversation-id": conversation},
        json={"model": "local", "messages": messages, "max_tokens": 16},
    )
    if response.status_code == 200:
        assert response.json()["choices"][0]["message"]["content"]
    action = response.headers.get("x-overspill-action", "")
    return Answer(conversation, index, response.status_code, action, sent_at, time.time())


def primaries_of(deployment: Deployment, prefix: str, names: list[str]) -> dict[str, int] | None:
    """The port of the primary that serves each conversation's keys (the tenant is read from
    the first conversation's stored extraction); None while it is not stored yet."""
    with deployment.client() as raw:
        keys = [key.decode() for key in scan(raw, f"{prefix}*h:*:{names[0]}")]
    if not keys:
        return None
    layout = KeyLayout(prefix, CLUSTER_BUCKETS if isinstance(deployment, ClusterSet) else 1)
    parsed = layout.parse(keys[0])
    assert parsed is not None
    tenant = parsed[1]
    return {name: deployment.primary_of(layout.lock(tenant, name)) for name in names}


def scan(raw: redis.Redis | redis.cluster.RedisCluster, pattern: str) -> list[bytes]:
    """Keys matching `pattern` on every primary."""
    if isinstance(raw, redis.cluster.RedisCluster):
        primaries = redis.cluster.RedisCluster.PRIMARIES
        return list(raw.scan_iter(match=pattern, target_nodes=primaries))
    return list(raw.scan_iter(match=pattern))


def assert_every_record_whole(deployment: Deployment, prefix: str) -> None:
    """Every record under the prefix decodes, and belongs to the key it is stored under."""
    layout = KeyLayout(prefix, CLUSTER_BUCKETS if isinstance(deployment, ClusterSet) else 1)
    seen = 0
    with deployment.client() as raw:
        for key in scan(raw, f"{prefix}*"):
            parsed = layout.parse(key.decode())
            if parsed is None:
                continue  # a lock, an index, calibration samples, the readiness key
            kind, tenant, owner = parsed
            value = raw.get(key)
            if value is None:
                continue  # expired or evicted since the scan
            record = decode(kind.record, value)
            assert (record.tenant, record.conversation_id) == (tenant, owner)
            seen += 1
    assert seen >= CONVERSATIONS


def recovery(log: str, killed_at: float) -> str:
    """When the process first found the store unavailable after the kill, and when it last
    found it reachable again (calls to other primaries may succeed in between)."""
    down = up = None
    outages = 0
    for line in log.splitlines():
        if not line.startswith("{"):
            continue
        record = orjson.loads(line)
        stamp = datetime.strptime(record["ts"], "%Y-%m-%dT%H:%M:%S.%fZ")
        at = stamp.replace(tzinfo=UTC).timestamp()
        message = str(record.get("msg"))
        if at < killed_at - 0.01:  # (log times are to the millisecond)
            continue
        if message.startswith("history store unavailable"):
            down = at if down is None else down
            outages += 1
        elif message == "history store reachable again" and down is not None:
            up = at
    if down is None:
        return "never found the store unavailable"
    if up is None:
        return f"found the store unavailable {down - killed_at:.1f} s after the kill, never again"
    return (
        f"found the store unavailable {down - killed_at:.1f} s after the kill, reachable for "
        f"good {up - killed_at:.1f} s after it (found unavailable {outages} times meanwhile)"
    )
