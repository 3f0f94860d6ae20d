"""A web page calling overspill from real Chromium: a page elsewhere cannot make the browser
spend a keyless gateway's model, a listed page can use it as a browser app, and a site whose
name resolves to this machine (DNS rebinding) reads nothing.

The page is served on loopback and opened under two names the browser resolves to it
(`--host-resolver-rules`), so its origin is a site's, not this machine's; overspill (real
`overspill serve`, keyless, on loopback: the sidecar default) lists one of them. The page
sends what any page can: a `text/plain` POST that needs no preflight (`mode: "no-cors"`), and
a JSON POST that does."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from tests.e2e.conftest import start_overspill, stop
from tests.e2e.relay import Recorded
from tests.e2e.serving import serving

pytestmark = pytest.mark.e2e

BROWSER_SECONDS = 120
PAGE = """<html><body><pre id="out">running</pre><script>
const url = "OVERSPILL/v1/chat/completions";
const body = JSON.stringify({model: "local", max_tokens: 4,
                             messages: [{role: "user", content: "Say hi."}]});
const out = [];
(async () => {
  try { await fetch(url, {method: "POST", body, mode: "no-cors"}); out.push("simple: sent"); }
  catch (e) { out.push("simple: " + e); }
  try {
    const r = await fetch(url, {method: "POST", body, headers: {"content-type": "application/json"}});
    const answer = await r.json();
    out.push("json: " + r.status + " " + (answer.choices ? "answered" : JSON.stringify(answer)));
  } catch (e) { out.push("json: " + e); }
  document.getElementById("out").textContent = out.join("\\n");
})();
</script></body></html>"""


@contextmanager
def page_server(calls: dict[str, str]) -> Iterator[int]:
    """The page, calling the overspill at `calls["url"]` (set once it runs), served on a
    free loopback port (yields the port, which overspill's config lists)."""

    class Page(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            html = PAGE.replace("OVERSPILL", calls["url"]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(html)))
            self.end_headers()
            self.wfile.write(html)

    with serving(Page) as url:
        yield int(url.removesuffix("/v1").rsplit(":", 1)[1])


def opened(url: str) -> str:
    """What the page wrote once its script ran."""
    return dom(url).split('<pre id="out">', 1)[-1].split("</pre>", 1)[0]


def dom(url: str) -> str:
    """The document at `url` once its scripts ran, opened in headless Chromium (no network but
    loopback: its own background traffic off; `*.test` names resolved to this machine)."""
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("chromium is not on PATH: run scripts/ensure-chromium.sh (`make test` does)")
    with tempfile.TemporaryDirectory() as profile:
        shown = subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={profile}",
             "--host-resolver-rules=MAP *.test 127.0.0.1", "--virtual-time-budget=60000",
             "--dump-dom", url],
            capture_output=True, text=True, timeout=BROWSER_SECONDS, check=True,
        ).stdout  # fmt: skip
    return shown


def test_a_page_elsewhere_spends_nothing_and_a_listed_page_is_answered(
    relay: tuple[str, Recorded], tmp_path: Path
) -> None:
    """From a site's page both requests fail: the simple one reaches overspill and is a 403
    before any model call, the JSON one is stopped at its preflight. From the listed page
    both are served, and the page reads the JSON answer."""
    upstream, recorded = relay
    calls: dict[str, str] = {}
    with page_server(calls) as port:
        config = (
            "model_list:\n  - model_name: local\n"
            f"    litellm_params: {{model: openai/local, api_base: {upstream}, timeout: 300}}\n"
            "    context: {window: 2048}\n"
            f"general_settings:\n  allowed_origins: [http://app.test:{port}]\n"
            "middleware: []\n"
        )
        process, calls["url"], log = start_overspill(config, tmp_path)
        try:
            before = len(recorded.bodies())
            elsewhere = opened(f"http://evil.test:{port}/")
            assert len(recorded.bodies()) == before, "a model was called for the page"
            listed = opened(f"http://app.test:{port}/")
        finally:
            stop(process)
    assert "simple: sent" in elsewhere
    assert "json: TypeError: Failed to fetch" in elsewhere
    assert '"status":403' in log.read_text()
    assert "json: 200 answered" in listed, listed
    assert len(recorded.bodies()) == before + 2


def test_a_site_rebound_to_this_machine_reads_nothing(
    relay: tuple[str, Recorded], tmp_path: Path
) -> None:
    """Chromium opening the keyless gateway under a site's name that resolves to 127.0.0.1
    (what a rebound page's own-origin GET is) gets the 403 naming the setting, not the
    models; under this machine's address, and under a listed name, it reads them."""
    upstream, _recorded = relay
    config = (
        "model_list:\n  - model_name: local\n"
        f"    litellm_params: {{model: openai/local, api_base: {upstream}, timeout: 300}}\n"
        "general_settings:\n  allowed_hosts: [gateway.test]\n"
        "middleware: []\n"
    )
    process, url, _log = start_overspill(config, tmp_path)
    port = url.removesuffix("/v1").rsplit(":", 1)[1]
    try:
        rebound = dom(f"http://evil.test:{port}/v1/models")
        local = dom(f"http://127.0.0.1:{port}/v1/models")
        listed = dom(f"http://gateway.test:{port}/v1/models")
    finally:
        stop(process)
    assert "host_not_allowed" in rebound, rebound
    assert "general_settings.allowed_hosts" in rebound
    assert '"id":"local"' not in rebound
    assert '"id":"local"' in local, local
    assert '"id":"local"' in listed, listed
