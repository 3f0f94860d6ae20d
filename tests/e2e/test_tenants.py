"""A real `overspill serve` shared by two apps, each with its own client key, before the real model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import MASTER_KEY, local_config, sdk_client, start_overspill, stop

pytestmark = [pytest.mark.e2e, pytest.mark.reliability("tenants")]

APP_A_KEY = "sk-e2e-app-a-7f3c"
APP_B_KEY = "sk-e2e-app-b-91d0"


def test_client_keys_through_a_real_server(
    llama_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each client key is its tenant on the log line (never the key); a limited key gets 403
    for another model, a client key 403 on admin routes, an unset key's entry is disabled."""
    monkeypatch.setenv("E2E_APP_A_KEY", APP_A_KEY)
    monkeypatch.delenv("E2E_APP_C_KEY", raising=False)
    config = local_config(llama_server).replace(
        f"  master_key: {MASTER_KEY}\n",
        f"  master_key: {MASTER_KEY}\n"
        "  client_keys:\n"
        "    - {name: app-a, key: os.environ/E2E_APP_A_KEY}\n"
        f"    - {{name: app-b, key: {APP_B_KEY}, models: [local]}}\n"
        "    - {name: app-c, key: os.environ/E2E_APP_C_KEY}\n",
    )
    process, url, log = start_overspill(config, tmp_path)
    try:
        question: list[Any] = [{"role": "user", "content": "Say hello."}]
        for key in (APP_A_KEY, APP_B_KEY):
            client = sdk_client(url, key, timeout=300)
            reply = client.chat.completions.create(model="local", messages=question, max_tokens=8)
            assert reply.choices[0].message.content is not None
        limited = sdk_client(url, APP_B_KEY)
        with pytest.raises(openai.PermissionDeniedError, match="may not use model 'other'"):
            limited.chat.completions.create(model="other", messages=question)
        with pytest.raises(openai.AuthenticationError):
            sdk_client(url, "sk-nobody").models.list()
        admin = httpx.get(url + "/overspill/conversations", headers={"authorization": APP_A_KEY})
        assert admin.status_code == 401  # not a bearer token
        admin = httpx.get(
            url + "/overspill/conversations", headers={"authorization": f"Bearer {APP_A_KEY}"}
        )
        assert (admin.status_code, admin.json()["error"]["code"]) == (403, "admin_only")
    finally:
        stop(process)
    text = log.read_text()
    assert APP_A_KEY not in text
    assert APP_B_KEY not in text
    assert MASTER_KEY not in text
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    served = [(line["tenant"], line["status"]) for line in lines if line.get("msg") == "request"]
    assert served == [("app-a", 200), ("app-b", 200), ("app-b", 403)]
    assert (
        "general_settings.client_keys[2] (app-c): its key's environment variable is unset" in text
    )
