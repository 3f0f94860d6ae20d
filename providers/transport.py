"""How the byte passthrough speaks HTTP to an upstream: one small interface, two clients.

`AiohttpUpstream` is the default: on the gateway bench it costs a fraction of httpx's CPU per
request (the HTTP client was most of a minimal passthrough's cost; see docs/benchmarks.md).
`HttpxUpstream` stays selectable (`general_settings.upstream_client: httpx`) for what only
httpx does: SOCKS proxies (`ALL_PROXY`), and a smaller peak memory under many large
concurrent answers. Both raise only `TransportError` / `TransportTimeout`, so the provider above
never sees either library's exceptions.
"""

from __future__ import annotations

import io
from base64 import b64encode
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Protocol
from urllib.parse import unquote, urlsplit, urlunsplit
from urllib.request import getproxies, proxy_bypass

if TYPE_CHECKING:
    import aiohttp
    import httpx

LARGE_BODY_BYTES = 1 << 20
"""aiohttp writes a larger request body as a stream (its own threshold for raw bytes)."""


class TransportError(Exception):
    """The upstream could not be reached, or the connection broke (the library's words kept)."""


class TransportTimeout(TransportError):
    """A connect, write or read phase took longer than its timeout."""


class Reply(Protocol):
    """An upstream's answer whose head has arrived; the body is read through `chunks`."""

    status: int

    def header(self, name: str) -> str | None:
        """One header's value (case-insensitive name), or None."""

    def headers_starting(self, prefix: bytes) -> dict[str, str]:
        """The headers whose lowercase name starts with `prefix`, as sent."""

    def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives (transfer and content encodings removed)."""

    async def aclose(self) -> None:
        """Give the connection back (kept alive only when the body was read to its end)."""


class Upstream(Protocol):
    """A pooled HTTP client for upstream calls."""

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], phases: float | None
    ) -> Reply:
        """Send a POST and return once the answer's head is in. `phases` bounds each
        phase (connect, write, each read); None means the client's defaults."""

    async def aclose(self) -> None:
        """Close every pooled connection."""


class AiohttpUpstream:
    """aiohttp's client session, made on first use (it belongs to the running event loop)."""

    def __init__(self, request_timeout: float, connect_timeout: float) -> None:
        self._request_timeout = request_timeout
        self._connect_timeout = connect_timeout
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[float | None, aiohttp.ClientTimeout] = {}
        self._proxies: dict[str, EnvProxy] = {}

    def _open(self) -> aiohttp.ClientSession:
        import aiohttp

        connector = aiohttp.TCPConnector(limit=1000, limit_per_host=0, ttl_dns_cache=300)
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=self._timeout(None),
            # Not `trust_env`: with it aiohttp looks up ~/.netrc and the proxy variables in
            # a worker thread on every request (two thread hops, ~0.3 ms of latency on a
            # busy core); the proxy is looked up once per upstream URL instead (`post`).
            skip_auto_headers=("User-Agent",),
        )
        return self._session

    def _timeout(self, seconds: float | None) -> aiohttp.ClientTimeout:
        found = self._timeouts.get(seconds)
        if found is None:
            import aiohttp

            read = self._request_timeout if seconds is None else seconds
            connect = self._connect_timeout if seconds is None else seconds
            found = aiohttp.ClientTimeout(total=None, connect=connect, sock_read=read)
            self._timeouts[seconds] = found
        return found

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], phases: float | None
    ) -> Reply:
        import aiohttp

        session = self._session or self._open()
        proxy = self._proxies.get(url)
        if proxy is None:  # one per upstream URL: the environment does not change
            proxy = self._proxies[url] = env_proxy(url)
        if proxy.request_headers is not None:
            headers = {**headers, **proxy.request_headers}
        try:
            response = await session.post(
                url,
                # past 1 MiB aiohttp warns that raw bytes are written in one go: stream them
                data=body if len(body) <= LARGE_BODY_BYTES else io.BytesIO(body),
                headers=headers,
                timeout=self._timeout(phases),
                proxy=proxy.url,
                proxy_headers=proxy.tunnel_headers,
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _aiohttp_error(exc) from exc
        return _AiohttpReply(response)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class EnvProxy:
    """How a request to one upstream URL goes through a proxy (`url` None: directly)."""

    __slots__ = ("request_headers", "tunnel_headers", "url")

    def __init__(self, url: str | None = None, basic: str | None = None, tunnel: bool = False):
        self.url = url
        credentials = None if basic is None else {"Proxy-Authorization": basic}
        self.tunnel_headers = credentials if tunnel else None
        """The proxy's credentials on the CONNECT of an https upstream."""
        self.request_headers = None if tunnel else credentials
        """The proxy's credentials on the request itself (an http upstream)."""


def env_proxy(url: str) -> EnvProxy:
    """The proxy the environment names for `url`, read as httpx reads it: `HTTP_PROXY` /
    `HTTPS_PROXY` by the URL's scheme (either case), unless `NO_PROXY` exempts its host;
    a proxy URL's `user:password@` becomes the proxy's Basic credentials."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    proxy = getproxies().get(parts.scheme)
    if not host or not proxy or proxy_bypass(host):
        return EnvProxy()
    address, basic = without_userinfo(proxy if "://" in proxy else f"http://{proxy}")
    return EnvProxy(address, basic, tunnel=parts.scheme == "https")


def without_userinfo(url: str) -> tuple[str, str | None]:
    """The URL without `user:password@`, and those as a Basic authorization header value."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    host = parts.netloc.rpartition("@")[2]
    pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
    basic = "Basic " + b64encode(pair.encode()).decode("ascii")
    return urlunsplit(parts._replace(netloc=host)), basic


class _AiohttpReply:
    __slots__ = ("_response", "status")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status

    def header(self, name: str) -> str | None:
        return self._response.headers.get(name)

    def headers_starting(self, prefix: bytes) -> dict[str, str]:
        return {
            key.decode("latin-1"): value.decode("latin-1")
            for key, value in self._response.raw_headers
            if key.lower().startswith(prefix)
        }

    async def chunks(self) -> AsyncIterator[bytes]:
        import aiohttp

        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _aiohttp_error(exc) from exc

    async def aclose(self) -> None:
        self._response.release()


def _aiohttp_error(exc: BaseException) -> TransportError:
    what = _described(exc)
    if isinstance(exc, TimeoutError):  # aiohttp's ServerTimeoutError is one too
        return TransportTimeout(what)
    return TransportError(what)


class HttpxUpstream:
    """An httpx.AsyncClient (made here from the timeouts, or given)."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    @classmethod
    def made(cls, request_timeout: float, connect_timeout: float) -> HttpxUpstream:
        import httpx

        return cls(
            httpx.AsyncClient(
                timeout=httpx.Timeout(request_timeout, connect=connect_timeout),
                limits=httpx.Limits(max_connections=1000, max_keepalive_connections=200),
            )
        )

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], phases: float | None
    ) -> Reply:
        import httpx

        request = self.client.build_request(
            "POST",
            url,
            content=body,
            headers=headers,
            timeout=phases if phases is not None else httpx.USE_CLIENT_DEFAULT,
        )
        try:
            response = await self.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise _httpx_error(exc) from exc
        return _HttpxReply(response)

    async def aclose(self) -> None:
        await self.client.aclose()


class _HttpxReply:
    __slots__ = ("_response", "status")

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status = response.status_code

    def header(self, name: str) -> str | None:
        value: str | None = self._response.headers.get(name)
        return value

    def headers_starting(self, prefix: bytes) -> dict[str, str]:
        return {
            key.decode("latin-1"): value.decode("latin-1")
            for key, value in self._response.headers.raw
            if key.lower().startswith(prefix)
        }

    async def chunks(self) -> AsyncIterator[bytes]:
        import httpx

        try:
            async for chunk in self._response.aiter_bytes():
                yield chunk
        except httpx.HTTPError as exc:
            raise _httpx_error(exc) from exc

    async def aclose(self) -> None:
        await self._response.aclose()


def _httpx_error(exc: BaseException) -> TransportError:
    import httpx

    what = _described(exc)
    if isinstance(exc, httpx.TimeoutException):
        return TransportTimeout(what)
    return TransportError(what)


def _described(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def upstream_client(name: str, request_timeout: float, connect_timeout: float) -> Upstream:
    """The upstream client `general_settings.upstream_client` names."""
    if name == "httpx":
        return HttpxUpstream.made(request_timeout, connect_timeout)
    return AiohttpUpstream(request_timeout, connect_timeout)
