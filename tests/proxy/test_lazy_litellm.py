"""litellm is imported on the first request only litellm can translate, never at startup."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import asyncio, logging, os, sys
import httpx, orjson
from tests.conftest import running
from tests.faulty_upstream import FaultyUpstream

CONFIG = '''
model_list:
  - model_name: wire
    litellm_params: {model: openai/faulty, api_base: "BASE/v1", api_key: sk-fake}
  - model_name: claude
    litellm_params: {model: anthropic/claude-faulty, api_base: "BASE", api_key: sk-fake}
  - model_name: gem
    litellm_params: {model: gemini/gemini-2.5-flash, api_base: "BASE/v1beta", api_key: AIza-fake}
general_settings: {store: {path: "STORE"}}
middleware: []
'''

async def main():
    seen = {}
    async with FaultyUpstream() as upstream:
        path = os.path.join(sys.argv[1], "config.yaml")
        with open(path, "w") as file:
            text = CONFIG.replace("BASE", upstream.base_url)
            file.write(text.replace("STORE", os.path.join(sys.argv[1], "store")))
        os.environ["OVERSPILL_CONFIG"] = path
        from proxy.server import app_from_env

        app = app_from_env()
        async with running(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://o.test") as client:
                seen["ready"] = (await client.get("/health/readiness")).status_code
                seen["at_start"] = "litellm" in sys.modules
                json_mode = {"response_format": {"type": "json_object"}}
                asks = {"wire": {}, "claude": {}, "gem": {}, "claude_json": json_mode, "gem_json": json_mode}
                for name, extra in asks.items():
                    body = {"model": name.removesuffix("_json"), "messages": [{"role": "user", "content": "hi"}], **extra}
                    answer = await client.post("/v1/chat/completions", json=body)
                    seen[name] = answer.status_code
                    seen[f"after_{name}"] = "litellm" in sys.modules
    seen["litellm_handlers"] = len(logging.getLogger("LiteLLM").handlers)
    print(orjson.dumps(seen).decode())

asyncio.run(main())
"""


@pytest.mark.reliability("memory")
def test_litellm_is_imported_by_the_first_request_that_needs_it(tmp_path: Path) -> None:
    """A worker with an OpenAI-wire, an `anthropic/...` and a `gemini/...` model starts and
    serves all three without importing litellm; the first request that only litellm's
    translation writes (`response_format`) imports it, is answered (Anthropic's and Gemini's),
    and litellm's loggers log through overspill's handler, not their own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        capture_output=True, text=True, env=env, cwd=ROOT, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = orjson.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {
        "ready": 200,
        "at_start": False,
        "wire": 200,
        "after_wire": False,
        "claude": 200,
        "after_claude": False,
        "gem": 200,
        "after_gem": False,
        "claude_json": 200,
        "after_claude_json": True,
        "gem_json": 200,
        "after_gem_json": True,
        "litellm_handlers": 0,
    }
