"""One `overspill serve --workers 2` on one real Redis: its two worker processes agree.

Which worker answers is read from the operating system, not from overspill: each test client
holds one keep-alive connection, and the worker process that owns the server side of that
connection (psutil, from /proc) is the one that answered. A conversation's turns are sent over
connections of both workers: one extraction between them, and the same splice on either.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import orjson
import psutil
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.e2e.conftest import MASTER_KEY, local_config, start_overspill, stop
from tests.e2e.relay import Recorded, answering_prompts
from tests.e2e.test_overflow_recovery import conversation

pytestmark = pytest.mark.e2e

WORKERS = 2
DEADLINE_SECONDS = 60


@dataclass(frozen=True)
class Workers:
    """A running `overspill serve --workers 2`: its URL, port and the workers' processes."""

    url: str
    port: int
    processes: tuple[psutil.Process, ...]

    def owner(self, client_port: int) -> int:
        """The PID of the worker serving the connection from `client_port`."""
        owners = {
            worker.pid
            for worker in self.processes
            for connection in worker.net_connections("tcp")
            if connection.laddr
            and connection.laddr.port == self.port
            and connection.raddr
            and connection.raddr.port == client_port
        }
        assert len(owners) == 1, f"connection from port {client_port}: owners {owners}"
        return owners.pop()


@dataclass(frozen=True)
class Answer:
    """What one worker answered: which worker, its x-overspill headers, the model's count."""

    worker: int
    headers: dict[str, str]
    prompt_tokens: int


@dataclass(frozen=True)
class Pinned:
    """An SDK client with a single keep-alive connection, which one worker serves."""

    client: openai.OpenAI
    worker: int


def _ready_workers(log: Path) -> int:
    records = [orjson.loads(line) for line in log.read_bytes().splitlines() if line[:1] == b"{"]
    return sum(record.get("msg") == "ready" for record in records)


@pytest.fixture(scope="module")
def workers(
    relay: tuple[str, Recorded], redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Workers]:
    """`overspill serve --workers 2` with its default layers and the Redis store, sending to
    the model through the relay; idle connections are kept long, so that a client's
    connection stays with its worker."""
    tmp = tmp_path_factory.mktemp("workers")
    store = f"{{backend: redis, url: '{redis_url}', key_prefix: 'e2e-{secrets.token_hex(3)}:', "
    store += "lock_wait_seconds: 300}"  # a loaded box's extraction outlasts the default 60 s
    text = local_config(relay[0], None, store)
    text = text.replace("general_settings:\n", "general_settings:\n  keep_alive_timeout: 600\n")
    process, url, log = start_overspill(text, tmp, "--workers", str(WORKERS))
    port = int(url.rsplit(":", 1)[1])
    try:
        deadline = time.monotonic() + DEADLINE_SECONDS
        while _ready_workers(log) < WORKERS:  # polling a real process's log, with a deadline
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            assert process.poll() is None, log.read_text()[-3000:]
            time.sleep(0.1)
        children = tuple(psutil.Process(process.pid).children())
        yield Workers(url, port, children)
    finally:
        stop(process)


@pytest.fixture
def pinned(workers: Workers) -> Iterator[dict[int, Pinned]]:
    """One single-connection client per worker (new connections are opened until each worker
    has one: which worker accepts a connection is the kernel's choice)."""
    found: dict[int, Pinned] = {}
    spare: list[openai.OpenAI] = []
    try:
        for _ in range(40):
            client = openai.OpenAI(
                base_url=workers.url + "/v1", api_key=MASTER_KEY, max_retries=0, timeout=600,
                http_client=httpx.Client(limits=httpx.Limits(max_connections=1, keepalive_expiry=600)),
            )  # fmt: skip
            raw = client.models.with_raw_response.list()
            worker = workers.owner(_client_port(raw.http_response))
            if worker in found:
                spare.append(client)
            else:
                found[worker] = Pinned(client, worker)
            if len(found) == WORKERS:
                break
        assert len(found) == WORKERS, f"40 connections, all served by {list(found)}"
        yield found
    finally:
        for client in [*spare, *(pin.client for pin in found.values())]:
            client.close()


def _client_port(response: httpx.Response) -> int:
    """The local port of the connection a response came on."""
    address = response.extensions["network_stream"].get_extra_info("client_addr")
    return int(address[1])


def send(
    workers: Workers,
    pin: Pinned,
    messages: list[ChatCompletionMessageParam],
    conversation_id: str,
) -> Answer:
    """One turn over `pin`'s connection; the answer says which worker served it."""
    raw = pin.client.chat.completions.with_raw_response.create(
        model="local", messages=messages, max_tokens=8, temperature=0,
        extra_headers={"X-Conversation-Id": conversation_id},
    )  # fmt: skip
    assert raw.status_code == 200
    worker = workers.owner(_client_port(raw.http_response))
    reply = raw.parse()
    assert reply.usage is not None
    headers = {k: v for k, v in raw.headers.items() if k.startswith("x-overspill-")}
    return Answer(worker, headers, reply.usage.prompt_tokens)


def test_one_conversation_on_both_workers_at_once_is_extracted_once(
    workers: Workers, pinned: dict[int, Pinned]
) -> None:
    """The same long conversation arriving on both workers at once is extracted only once:
    the other worker waits for it in the shared store and reuses it."""
    messages: list[ChatCompletionMessageParam] = [
        *conversation(32),
        {"role": "user", "content": "Who is the captain?"},
    ]
    conversation_id = f"workers-{secrets.token_hex(3)}"
    with ThreadPoolExecutor(WORKERS) as pool:
        answers = list(
            pool.map(lambda pin: send(workers, pin, messages, conversation_id), pinned.values())
        )
    assert {answer.worker for answer in answers} == set(pinned)
    extracted = [a for a in answers if int(a.headers.get("x-overspill-extraction-calls", "0")) > 0]
    assert len(extracted) == 1, [answer.headers for answer in answers]
    other = next(answer for answer in answers if answer not in extracted)
    assert other.headers["x-overspill-action"] in ("reused", "spliced")


def test_an_extraction_by_one_worker_splices_alike_on_the_other(
    workers: Workers, pinned: dict[int, Pinned], relay: tuple[str, Recorded]
) -> None:
    """A conversation extracted on one worker is spliced by the other on the next turn, into
    the same prompt either worker sends for that turn (the prompts compared, as the relay
    recorded them: what the model server has cached changes its batches, which move a greedy
    answer's last tokens)."""
    first, second = pinned.values()
    conversation_id = f"workers-{secrets.token_hex(3)}"
    messages: list[ChatCompletionMessageParam] = [
        *conversation(30),
        {"role": "user", "content": "What is the vault code?"},
    ]
    opening = send(workers, first, messages, conversation_id)
    assert opening.headers["x-overspill-action"] == "spliced+extracted"
    messages += [
        {"role": "assistant", "content": "ZX-4471"},
        {"role": "user", "content": "And the captain?"},
    ]
    since = len(relay[1].bodies())
    on_second = send(workers, second, messages, conversation_id)
    on_first = send(workers, first, messages, conversation_id)
    prompts = answering_prompts(relay[1], since, "And the captain?")
    assert len(prompts) == 2
    assert prompts[0] == prompts[1]
    assert (opening.worker, on_second.worker, on_first.worker) == (
        first.worker,
        second.worker,
        first.worker,
    )
    assert on_second.headers["x-overspill-action"] in ("spliced", "spliced+extracted")
    assert on_first.headers["x-overspill-action"] == "spliced"
    assert (
        on_second.headers["x-overspill-messages-replaced"]
        == (on_first.headers["x-overspill-messages-replaced"])
    )
    assert on_second.prompt_tokens == on_first.prompt_tokens
