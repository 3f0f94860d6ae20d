"""The command line's calls to a running overspill: answers, and what it says when there is none."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from cli.main import main
from proxy.admin_client import AdminCallError, call

ANSWERS: Mapping[str, tuple[int, str, bytes]] = {
    "/overspill/conversations": (404, "text/html", b"<html><body>Not Found</body></html>"),
    "/overspill/usage": (502, "text/html", b"<html>Bad Gateway</html>"),
    "/overspill/ollama/refresh": (200, "application/json", b"[1, 2]"),
    "/denied": (401, "application/json", b'{"error": {"message": "invalid key"}}'),
    "/fine": (200, "application/json", b'{"data": []}'),
    "/health": (
        503,
        "application/json",
        b'{"healthy_endpoints": [], "unhealthy_endpoints": [{"model_name": "local", '
        b'"model": "openai/smollm2", "api_base": "http://127.0.0.1:8081/v1", '
        b'"error": "cannot reach upstream", "status": 502, "seconds": 0.01}], '
        b'"unchecked_endpoints": [{"model_name": "openai/*", "model": "openai/*", '
        b'"reason": "a wildcard"}], "healthy_count": 0, "unhealthy_count": 1}',
    ),
}
"""What the scripted server answers on each path: (status, content type, body)."""


class _Scripted(BaseHTTPRequestHandler):
    """Answers each path as `ANSWERS` says."""

    def _answer(self) -> None:
        status, kind, body = ANSWERS[self.path.split("?")[0]]
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = _answer

    def log_message(self, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def scripted() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


def test_a_json_object_is_the_answer(scripted: str) -> None:
    """A JSON object answered with a success status is returned as it is."""
    assert call("GET", scripted, "/fine", "k") == {"data": []}


def test_overspills_own_error_message_is_said(scripted: str) -> None:
    """An error status with overspill's error object says its status and message."""
    with pytest.raises(AdminCallError, match=r"answered 401 Unauthorized: invalid key$"):
        call("GET", scripted, "/denied", None)


def test_an_address_that_is_not_overspills_is_named_as_such(scripted: str) -> None:
    """An HTML error page or a JSON answer that is no object is said to come from somewhere
    that may not be overspill, not read as JSON into a traceback."""
    with pytest.raises(AdminCallError, match=r"answered 404 Not Found, not overspill's error"):
        call("GET", scripted, "/overspill/conversations", None)
    with pytest.raises(AdminCallError, match=r"answered 200 OK with no JSON object"):
        call("POST", scripted, "/overspill/ollama/refresh", None)


def test_an_address_that_cannot_be_reached_says_so() -> None:
    """A refused connection or a URL with no scheme says it could not reach the address."""
    with pytest.raises(AdminCallError, match=r"^cannot reach http://127\.0\.0\.1:9: "):
        call("GET", "http://127.0.0.1:9", "/overspill/usage", None)
    with pytest.raises(AdminCallError, match=r"^cannot reach localhost:4000: "):
        call("GET", "localhost:4000", "/overspill/usage", None)


@pytest.mark.parametrize(
    ("command", "said"),
    [
        (
            ["conversations", "ls"],
            "conversations ls: {url} answered 404 Not Found, not overspill's",
        ),
        (["usage"], "usage: {url} answered 502 Bad Gateway, not overspill's"),
        (["ollama", "refresh"], "ollama refresh: {url} answered 200 OK with no JSON object"),
    ],
)
def test_each_command_says_it_in_one_line_and_exits_1(
    scripted: str, command: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`conversations`, `usage` and `ollama refresh` with --url print the reason on one line
    and exit 1 (each read an HTML page as JSON, into a traceback)."""
    assert main([*command, "--url", scripted]) == 1
    err = capsys.readouterr().err
    assert err.startswith(said.format(url=scripted))
    assert "Traceback" not in err
    assert err.count("\n") == 1


def test_health_prints_each_deployment_and_exits_1_when_one_is_unhealthy(
    scripted: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`overspill health` reads /health's 503 as its answer, prints a line per deployment
    and the counts, and exits 1 since a deployment is unhealthy."""
    assert main(["health", "--url", scripted, "--model", "local"]) == 1
    assert capsys.readouterr().out.splitlines() == [
        "unhealthy  local (openai/smollm2 at http://127.0.0.1:8081/v1): 502 cannot reach upstream",
        "unchecked  openai/* (openai/*): a wildcard",
        "0 healthy, 1 unhealthy, 1 unchecked",
    ]
