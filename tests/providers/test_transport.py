"""Both upstream clients keep one contract against a real local HTTP server."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from providers.transport import TransportError, TransportTimeout, Upstream, upstream_client
from tests.ports import free_port

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@pytest.fixture(params=["aiohttp", "httpx"])
async def client(request: pytest.FixtureRequest) -> AsyncIterator[Upstream]:
    """Each upstream client overspill can use, closed after the test."""
    made = upstream_client(request.param, 5.0, 5.0)
    yield made
    await made.aclose()


class Server:
    """A local server that runs `script` for each connection and remembers request heads."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.heads: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> Server:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    @property
    def url(self) -> str:
        assert self.server is not None
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1/chat/completions"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # closed on every way out, a client gone before its head included: a writer left
        # open is collected in a later test, whose run then fails on its ResourceWarning
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                (int(line.split(b":")[1]) for line in head.split(b"\r\n")
                 if line.lower().startswith(b"content-length:")), 0,
            )  # fmt: skip
            await reader.readexactly(length)
            self.heads.append(head)
            await self.script(reader, writer)
        finally:
            writer.close()


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked body."""
    return b"%x\r\n%s\r\n" % (len(data), data)


async def test_status_headers_and_body(client: Upstream) -> None:
    """The status, any header by any case, the passed-on headers and the body arrive intact."""
    body = b'{"id":"x"}' * 1000

    async def answer(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n"
            b"Retry-After: 7\r\nX-RateLimit-Remaining-Tokens: 0\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(body), body)
        )
        await writer.drain()

    async with Server(answer) as server:
        reply = await client.post(server.url, b"{}", {"content-type": "application/json"}, None)
        assert reply.status == 429
        assert reply.header("retry-after") == "7"
        assert reply.header("x-missing") is None
        assert reply.headers_starting(b"x-ratelimit-") == {"X-RateLimit-Remaining-Tokens": "0"}
        assert b"".join([part async for part in reply.chunks()]) == body
        await reply.aclose()
    assert b"content-type: application/json" in server.heads[0].lower()


async def test_a_streamed_body_arrives_as_it_is_sent(client: Upstream) -> None:
    """The first chunk reaches the caller before the server has sent the second one."""
    first_read = asyncio.Event()

    async def stream(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n" + chunk(b"data: 1\n\n")
        )
        await writer.drain()
        await first_read.wait()
        writer.write(chunk(b"data: 2\n\n") + b"0\r\n\r\n")
        await writer.drain()

    async with Server(stream) as server:
        reply = await client.post(server.url, b"{}", {}, None)
        parts = reply.chunks()
        assert await anext(parts) == b"data: 1\n\n"
        first_read.set()
        assert b"".join([part async for part in parts]) == b"data: 2\n\n"
        await reply.aclose()


async def test_a_refused_connection_is_a_transport_error(client: Upstream) -> None:
    """Nothing listening: a TransportError (not a timeout) that says what the library saw."""
    with pytest.raises(TransportError) as caught:
        await client.post(f"http://127.0.0.1:{free_port()}/v1/x", b"{}", {}, None)
    assert not isinstance(caught.value, TransportTimeout)
    assert str(caught.value)


async def test_a_silent_server_is_a_timeout_of_the_given_phase(client: Upstream) -> None:
    """A server that never answers: TransportTimeout once the per-phase timeout passes."""
    never = asyncio.Event()

    async def hang(_: asyncio.StreamReader, __: asyncio.StreamWriter) -> None:
        await never.wait()

    async with Server(hang) as server:
        with pytest.raises(TransportTimeout):
            await client.post(server.url, b"{}", {}, 0.05)
        never.set()


async def test_a_reset_in_the_middle_of_a_chunked_body_is_an_error(client: Upstream) -> None:
    """A connection reset mid-body ends the chunks with a TransportError, not a quiet end."""

    async def reset(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n" + chunk(b"data: 1\n\n")
        )
        await writer.drain()
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    async with Server(reset) as server:
        reply = await client.post(server.url, b"{}", {}, None)
        with pytest.raises(TransportError):
            async for _ in reply.chunks():
                pass
        await reply.aclose()


async def test_a_connection_is_reused_only_after_a_whole_body(client: Upstream) -> None:
    """Two calls whose bodies were read to the end share one pooled connection."""
    connections = 0

    async def keep_alive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while True:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()
            try:
                await reader.readuntil(b"\r\n\r\n")
                await reader.readexactly(2)
            except asyncio.IncompleteReadError:
                return

    async with Server(keep_alive) as server:
        for _ in range(2):
            reply = await client.post(server.url, b"{}", {}, None)
            assert b"".join([part async for part in reply.chunks()]) == b"ok"
            await reply.aclose()
        assert connections == 1


async def _ok(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
    await writer.drain()


def _through(proxy: Server, variable: str, name: str, monkeypatch: pytest.MonkeyPatch) -> Upstream:
    """A new client of kind `name`, with `variable` naming `proxy` (as bob:s@cret) and no
    NO_PROXY (the variables are read when the client is made or first sends)."""
    address = proxy.url.split("/")[2]
    monkeypatch.setenv(variable, f"http://bob:s%40cret@{address}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    return upstream_client(name, 5.0, 5.0)


@pytest.mark.parametrize("name", ["aiohttp", "httpx"])
async def test_the_proxy_the_environment_names_is_used_with_its_credentials(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTP_PROXY routes the request through that proxy, its user:password sent as Basic."""
    async with Server(_ok) as proxy:
        made = _through(proxy, "HTTP_PROXY", name, monkeypatch)
        try:
            reply = await made.post("http://upstream.test/v1/chat/completions", b"{}", {}, None)
            assert reply.status == 200
            await reply.aclose()
        finally:
            await made.aclose()
    head = proxy.heads[0].decode().lower()
    assert head.startswith("post http://upstream.test/v1/chat/completions ")
    assert "proxy-authorization: basic ym9ionnay3jlda==" in head  # bob:s@cret


@pytest.mark.parametrize("name", ["aiohttp", "httpx"])
async def test_no_proxy_sends_that_host_directly(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host NO_PROXY names is reached directly even when HTTP_PROXY is set."""
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    async with Server(_ok) as server:
        made = upstream_client(name, 5.0, 5.0)
        try:
            reply = await made.post(server.url, b"{}", {}, None)
            assert reply.status == 200
            await reply.aclose()
        finally:
            await made.aclose()
    assert server.heads[0].startswith(b"POST /v1/chat/completions ")


@pytest.mark.parametrize("name", ["aiohttp", "httpx"])
async def test_an_https_upstream_is_tunnelled_with_the_proxy_credentials(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """For an https upstream the proxy gets a CONNECT carrying the credentials (this proxy
    then answers no TLS: a TransportError, never the credentials sent to the upstream)."""

    async def no_tls(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\nnot tls")
        await writer.drain()

    async with Server(no_tls) as proxy:
        made = _through(proxy, "HTTPS_PROXY", name, monkeypatch)
        try:
            with pytest.raises(TransportError):
                await made.post("https://upstream.test/v1/chat/completions", b"{}", {}, None)
        finally:
            await made.aclose()
    head = proxy.heads[0].decode().lower()
    assert head.startswith("connect upstream.test:443 ")
    assert "proxy-authorization: basic ym9ionnay3jlda==" in head
