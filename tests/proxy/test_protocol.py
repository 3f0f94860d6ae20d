"""Raw bytes against a real `overspill serve`: malformed, huge, slow, idle and pipelined
requests are each answered (in the OpenAI error shape) or closed within a bound, never a 500.

The process runs with short limits (`client_header_timeout`, `client_body_timeout`: 0.5 s,
`keep_alive_timeout`: 1 s, `max_header_bytes`: 8 KiB), so a slow client is refused quickly.
No upstream is needed: these requests never get that far (the model's address is closed).
"""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.e2e.conftest import start_overspill, stop
from tests.reliability import examples

MASTER = "sk-protocol-master"
MAX_HEADER_BYTES = 8192
BOUND_SECONDS = 15.0
"""How long any exchange may take on a loaded 2-core box (the limits are under 1 s)."""
CONFIG = f"""
model_list:
  - model_name: local
    litellm_params: {{model: openai/x, api_base: "http://127.0.0.1:9/v1"}}
general_settings:
  master_key: {MASTER}
  max_body_bytes: 4096
  max_header_bytes: {MAX_HEADER_BYTES}
  client_header_timeout: 0.5
  client_body_timeout: 0.5
  keep_alive_timeout: 1
  allowed_hosts: [gateway.example.com]
  store: {{path: store}}
middleware: []
"""
AUTH = f"Authorization: Bearer {MASTER}\r\n".encode()
CHAT = orjson.dumps({"model": "local", "messages": [{"role": "user", "content": "hi"}]})


@dataclass
class Answer:
    """One response read off the socket."""

    status: int
    headers: dict[bytes, bytes]
    body: bytes


@dataclass
class Exchange:
    """What the server sent on one connection, and how it ended."""

    answers: list[Answer] = field(default_factory=list)
    closed: bool = False
    seconds: float = 0.0
    rest: bytes = b""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """`overspill serve` with short connection limits, for the module."""
    process, url, _log = start_overspill(CONFIG, tmp_path_factory.mktemp("protocol"))
    try:
        host, port = url.removeprefix("http://").split(":")
        yield host, int(port)
    finally:
        stop(process)


def parse(data: bytes) -> tuple[list[Answer], bytes]:
    """The complete responses at the start of `data`, and what is left over."""
    answers: list[Answer] = []
    while b"\r\n\r\n" in data:
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ")[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        if b"content-length" in headers:
            size = int(headers[b"content-length"])
            if len(rest) < size:
                break
            body, data = rest[:size], rest[size:]
        elif headers.get(b"transfer-encoding") == b"chunked":
            body, data, done = b"", rest, False
            while b"\r\n" in data:
                size_line, _, after = data.partition(b"\r\n")
                size = int(size_line, 16)
                if len(after) < size + 2:
                    break
                body, data = body + after[:size], after[size + 2 :]
                if size == 0:
                    done = True
                    break
            if not done:
                break
        else:
            body, data = rest, b""
        answers.append(Answer(status, headers, body))
    return answers, data


def exchange(
    server: tuple[str, int], *pieces: bytes, expect: int = 1, trickle: bool = False
) -> Exchange:
    """Send `pieces` (one byte at a time while the server stays silent, with `trickle`), then
    read until `expect` responses are complete or the server closes; failing at the bound."""
    started = time.monotonic()
    result = Exchange()
    received = b""
    with socket.create_connection(server, timeout=BOUND_SECONDS) as sock:
        try:
            for piece in pieces:
                if trickle:
                    for index in range(len(piece)):
                        sock.sendall(piece[index : index + 1])
                        sock.settimeout(0.05)  # poll: has the server answered yet?
                        try:
                            received += sock.recv(65536)
                            break
                        except TimeoutError:
                            continue
                    sock.settimeout(BOUND_SECONDS)
                else:
                    sock.sendall(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server refused and closed while the client was still sending
        while True:
            result.answers, result.rest = parse(received)
            if len(result.answers) >= expect and expect:
                break
            remaining = BOUND_SECONDS - (time.monotonic() - started)
            if remaining <= 0:
                pytest.fail(f"no answer and no close within {BOUND_SECONDS} s: {received[:200]!r}")
            sock.settimeout(remaining)
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                result.closed = True
                result.answers, result.rest = parse(received)
                break
            received += chunk
    result.seconds = time.monotonic() - started
    return result


def assert_well_formed(result: Exchange) -> None:
    """No 500, and every refusal is the OpenAI error JSON."""
    for answer in result.answers:
        assert answer.status < 500, answer
        assert b"location" not in answer.headers
        if answer.status >= 400:
            assert answer.headers[b"content-type"] == b"application/json", answer
            error = orjson.loads(answer.body)["error"]
            assert set(error) == {"message", "type", "param", "code"}, error


def refused(result: Exchange, status: int, code: str) -> str:
    """The one answer is `status` with error `code`; returns its message."""
    assert_well_formed(result)
    assert [a.status for a in result.answers] == [status], result
    error = orjson.loads(result.answers[0].body)["error"]
    assert error["code"] == code, error
    return str(error["message"])


def request(
    method: bytes = b"GET",
    path: bytes = b"/health/liveness",
    headers: bytes = b"",
    body: bytes = b"",
    *,
    length: bool = True,
) -> bytes:
    """A request's bytes (Host and, when `length`, Content-Length added)."""
    sized = f"Content-Length: {len(body)}\r\n".encode() if length and body else b""
    return method + b" " + path + b" HTTP/1.1\r\nHost: t\r\n" + headers + sized + b"\r\n" + body


MALFORMED = {
    "garbage request line": b"GARBAGE\r\n\r\n",
    "bad method characters": b"G@T / HTTP/1.1\r\nHost: t\r\n\r\n",
    "unknown HTTP version": b"GET / HTTP/9.9\r\nHost: t\r\n\r\n",
    "HTTP/2 preface": b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    "NUL in a header": b"GET / HTTP/1.1\r\nHost: t\r\nX-A: a\x00b\r\n\r\n",
    "space before colon": b"GET / HTTP/1.1\r\nHost : t\r\n\r\n",
    "obsolete line folding": b"GET / HTTP/1.1\r\nHost: t\r\nX-A: a\r\n b\r\n\r\n",
    "invalid UTF-8 in the path": b"GET /\xff\xfe HTTP/1.1\r\nHost: t\r\n\r\n",
    "Content-Length not a number": request(b"POST", headers=b"Content-Length: abc\r\n"),
    "negative Content-Length": request(b"POST", headers=b"Content-Length: -1\r\n"),
    "two Content-Lengths": request(b"POST", headers=b"Content-Length: 1\r\nContent-Length: 2\r\n"),
    "Content-Length and chunked": request(
        b"POST", headers=b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n"
    ),
    "chunk size not hex": request(
        b"POST", headers=b"Transfer-Encoding: chunked\r\n", body=b"zz\r\n", length=False
    ),
    "chunk size overflow": request(
        b"POST", headers=b"Transfer-Encoding: chunked\r\n", body=b"f" * 40 + b"\r\n", length=False
    ),
    "unknown transfer coding": request(b"POST", headers=b"Transfer-Encoding: gzip\r\n"),
}


@pytest.mark.reliability("protocol")
@pytest.mark.parametrize("data", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_requests_get_a_json_400_and_a_close(
    server: tuple[str, int], data: bytes
) -> None:
    """What the HTTP parser rejects is a 400 invalid_http_request in the OpenAI shape."""
    result = exchange(server, data, expect=0)
    message = refused(result, 400, "invalid_http_request")
    assert message.startswith("invalid HTTP request")
    assert result.closed
    assert result.answers[0].headers[b"connection"] == b"close"


OVERSIZED = {
    "one huge header": request(headers=b"X-Big: " + b"a" * 100_000 + b"\r\n"),
    "many small headers": request(headers=b"".join(b"X-%d: v\r\n" % i for i in range(5000))),
    "a huge request target": request(path=b"/health/liveness?" + b"q" * 100_000),
    "a 1 MB header never ended": request().split(b"\r\n\r\n")[0] + b"\r\nX-Big: " + b"a" * 10**6,
    "just over the limit": request(headers=b"X-Big: " + b"a" * MAX_HEADER_BYTES + b"\r\n"),
}


@pytest.mark.reliability("protocol")
@pytest.mark.parametrize("data", OVERSIZED.values(), ids=OVERSIZED.keys())
def test_oversized_heads_get_a_json_431(server: tuple[str, int], data: bytes) -> None:
    """A request line and headers over max_header_bytes are refused with 431, whole or not."""
    message = refused(exchange(server, data), 431, "headers_too_large")
    assert "general_settings.max_header_bytes" in message


@pytest.mark.reliability("protocol")
def test_headers_within_the_limit_are_served(server: tuple[str, int]) -> None:
    """A head just under max_header_bytes is a normal request."""
    filler = b"X-Fill: " + b"a" * (MAX_HEADER_BYTES - 200) + b"\r\n"
    result = exchange(server, request(headers=filler))
    assert [a.status for a in result.answers] == [200]


@pytest.mark.reliability("protocol")
def test_a_slow_head_is_cut_with_a_json_408(server: tuple[str, int]) -> None:
    """A head sent a byte at a time is refused (408) before its end: no slowloris."""
    head = request(headers=b"".join(b"X-%d: %s\r\n" % (i, b"v" * 40) for i in range(60)))
    result = exchange(server, head, trickle=True)
    message = refused(result, 408, "request_timeout")
    assert "client_header_timeout" in message


@pytest.mark.reliability("protocol")
def test_an_unfinished_head_is_cut_with_a_json_408(server: tuple[str, int]) -> None:
    """A head that stops arriving is refused (408) and closed, not held open."""
    result = exchange(server, b"GET /health/liveness HTTP/1.1\r\nHost: t\r\n", expect=0)
    refused(result, 408, "request_timeout")
    assert result.closed


BODY_CUT = {
    "Content-Length longer than the body": request(
        b"POST", b"/v1/chat/completions", AUTH + b"Content-Length: 100\r\n", b"{}", length=False
    ),
    "chunked without its last chunk": request(
        b"POST",
        b"/v1/chat/completions",
        AUTH + b"Transfer-Encoding: chunked\r\n",
        b"2\r\n{}\r\n",
        length=False,
    ),
}


@pytest.mark.reliability("protocol")
@pytest.mark.parametrize("data", BODY_CUT.values(), ids=BODY_CUT.keys())
def test_an_unfinished_body_is_cut_with_a_json_408(server: tuple[str, int], data: bytes) -> None:
    """A body that stops arriving is refused (408 naming client_body_timeout) and closed."""
    result = exchange(server, data, expect=0)
    assert "client_body_timeout" in refused(result, 408, "request_timeout")
    assert result.closed


@pytest.mark.reliability("protocol")
def test_an_idle_connection_is_closed_without_a_word(server: tuple[str, int]) -> None:
    """A connection that never sends a byte is closed after keep_alive_timeout."""
    result = exchange(server, expect=0)
    assert result.closed
    assert not result.answers
    assert not result.rest


@pytest.mark.reliability("protocol")
def test_an_idle_keep_alive_connection_is_closed_after_its_response(
    server: tuple[str, int],
) -> None:
    """After a response, a silent keep-alive connection is closed (no 408 sent into it)."""
    result = exchange(server, request(), expect=0)
    assert result.closed
    assert [a.status for a in result.answers] == [200]
    assert not result.rest


@pytest.mark.reliability("protocol")
def test_pipelined_requests_are_answered_in_order(server: tuple[str, int]) -> None:
    """Three requests in one write: three answers, in order, on one connection."""
    chat = request(b"POST", b"/v1/chat/completions", AUTH, CHAT.replace(b'"local"', b'"nope"'))
    result = exchange(server, request() + chat + request(b"GET", b"/nowhere"), expect=3)
    assert_well_formed(result)
    assert [a.status for a in result.answers] == [200, 404, 404]
    assert orjson.loads(result.answers[1].body)["error"]["code"] == "model_not_found"


@pytest.mark.reliability("protocol")
def test_a_trailing_slash_is_a_404_never_a_redirect_to_the_clients_host(
    server: tuple[str, int],
) -> None:
    """POST /v1/chat/completions/ addressed to the public name a reverse proxy passes: a JSON
    404 naming the route, no Location."""
    data = b"POST /v1/chat/completions/ HTTP/1.1\r\nHost: gateway.example.com\r\n" + AUTH
    data += b"Content-Length: %d\r\n\r\n" % len(CHAT) + CHAT
    message = refused(exchange(server, data), 404, "not_found")
    assert "drop the trailing slash" in message


@pytest.mark.reliability("protocol")
def test_a_request_addressed_to_a_site_is_refused_on_loopback(server: tuple[str, int]) -> None:
    """`overspill serve` on 127.0.0.1 answers a request whose Host is a site's name (a page
    whose DNS was rebound) with a 403 naming general_settings.allowed_hosts."""
    data = request(headers=b"", path=b"/v1/models").replace(b"Host: t", b"Host: evil.example")
    message = refused(exchange(server, data), 403, "host_not_allowed")
    assert "general_settings.allowed_hosts" in message


@pytest.mark.reliability("protocol")
def test_a_declared_body_over_the_limit_is_refused_before_it_is_sent(
    server: tuple[str, int],
) -> None:
    """Expect: 100-continue with a Content-Length over max_body_bytes: 413 at once."""
    data = request(b"POST", b"/v1/chat/completions", AUTH + b"Expect: 100-continue\r\n")
    data = data.replace(b"\r\n\r\n", b"\r\nContent-Length: 999999999\r\n\r\n")
    refused(exchange(server, data), 413, "payload_too_large")


@pytest.mark.reliability("protocol")
def test_a_chunked_body_over_the_limit_is_refused_while_it_is_read(
    server: tuple[str, int],
) -> None:
    """A chunked body (no length to check up front) is cut at max_body_bytes: 413."""
    chunk = b"x" * 1000
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(10)) + b"0\r\n\r\n"
    data = request(
        b"POST", b"/v1/chat/completions", AUTH + b"Transfer-Encoding: chunked\r\n", chunks,
        length=False,
    )  # fmt: skip
    refused(exchange(server, data), 413, "payload_too_large")


INVALID_TEXT = {
    "invalid UTF-8 in the body": request(
        b"POST", b"/v1/chat/completions", AUTH, b'{"model":"local","messages":"\xff\xfe"}'
    ),
    "invalid UTF-8 in the conversation id": request(
        b"POST", b"/v1/chat/completions", AUTH + b"X-Conversation-Id: \xff\xfe\r\n", CHAT
    ),
    "invalid UTF-8 in the key": request(
        b"POST", b"/v1/chat/completions", b"Authorization: Bearer \xff\r\n", CHAT
    ),
    "a superscript digit as length": request(b"POST", headers=b"Content-Length: \xb2\r\n"),
}


@pytest.mark.reliability("protocol")
@pytest.mark.parametrize("data", INVALID_TEXT.values(), ids=INVALID_TEXT.keys())
def test_invalid_text_is_refused_in_json(server: tuple[str, int], data: bytes) -> None:
    """Bytes that are not UTF-8 (or not digits) where text is expected: a JSON 4xx."""
    result = exchange(server, data)
    assert_well_formed(result)
    assert len(result.answers) == 1
    assert 400 <= result.answers[0].status < 500


@pytest.mark.reliability("protocol")
def test_an_upgrade_request_is_answered_as_http_1_1(server: tuple[str, int]) -> None:
    """Asking to upgrade (WebSocket, h2c) gets the plain HTTP/1.1 answer and a close."""
    data = request(headers=b"Connection: Upgrade\r\nUpgrade: websocket\r\n")
    result = exchange(server, data, expect=0)
    assert [a.status for a in result.answers] == [200]
    assert result.closed


VALID = [
    request(),
    request(b"GET", b"/v1/models", AUTH),
    request(b"POST", b"/v1/chat/completions", AUTH, CHAT.replace(b'"local"', b'"nope"')),
    request(b"POST", b"/v1/chat/completions", AUTH, b'{"model":"local","messages":[]}'),
    request(b"DELETE", b"/overspill/conversations/x", AUTH),
]


def mutate(data: bytes, seed: int) -> bytes:
    """One to three random edits of a valid request: bytes inserted, removed or replaced."""
    rng = random.Random(seed)
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(data) + 1)
        noise = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        noise = rng.choice([noise, b"\r\n", b"\n", b":", b" ", b"\x00", b"0" * 30, noise * 2000])
        edit = rng.choice(["insert", "remove", "replace", "cut"])
        if edit == "insert":
            data = data[:at] + noise + data[at:]
        elif edit == "remove":
            data = data[:at] + data[at + rng.randint(1, 20) :]
        elif edit == "replace":
            data = data[:at] + noise + data[at + len(noise) :]
        else:
            data = data[:at]
    return data


@pytest.mark.reliability("fuzz")
@settings(
    max_examples=examples(15, 300),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(base=st.sampled_from(VALID), seed=st.integers(0, 2**32), pipelined=st.booleans())
def test_mutated_requests_are_answered_or_closed_in_time(
    server: tuple[str, int], base: bytes, seed: int, pipelined: bool
) -> None:
    """Randomly edited request bytes (one, or before a valid one): answered or closed within
    the bound, never a 500, every refusal in JSON."""
    data = mutate(base, seed) + (request() if pipelined else b"")
    result = exchange(server, data, expect=0)
    assert_well_formed(result)


def test_the_parser_reads_what_the_server_writes() -> None:
    """`parse` splits content-length and chunked responses and keeps an incomplete rest."""
    first = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
    second = b"HTTP/1.1 404 Not Found\r\ntransfer-encoding: chunked\r\n\r\n2\r\nno\r\n0\r\n\r\n"
    answers, rest = parse(first + second + b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nab")
    assert [(a.status, a.body) for a in answers] == [(200, b"ok"), (404, b"no")]
    assert rest.endswith(b"ab")


def test_the_limits_in_the_config_are_the_ones_served(tmp_path: Path) -> None:
    """The module's config loads with its short limits (what the process enforces)."""
    from kernel.config_loading import load_config
    from proxy.limits import ConnectionLimits

    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    limits = ConnectionLimits.of(load_config(str(path)).settings.general_settings)
    assert limits == ConnectionLimits(MAX_HEADER_BYTES, 0.5, 0.5, 1)


@pytest.mark.reliability("protocol")
def test_an_oversized_head_pipelined_behind_a_request_is_refused(server: tuple[str, int]) -> None:
    """A head over the bound in the same write as the request before it: 200, then 431."""
    big = request(headers=b"X-Big: " + b"a" * (MAX_HEADER_BYTES + 10) + b"\r\n")
    result = exchange(server, request() + big, expect=0)
    assert_well_formed(result)
    assert [a.status for a in result.answers] == [200, 431]
    assert result.closed
