"""Real LiteLLM proxy configs (tests/fixtures/litellm_configs, each naming its source) pass
`overspill check-config` and start a real app that answers its health endpoints."""

from __future__ import annotations

import gc
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from cli.main import main
from kernel.config_loading import ConfigError, load_config
from kernel.wildcards import is_wildcard
from proxy import logs, server
from proxy.cli import CONFIG_ENV
from tests.conftest import running

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "litellm_configs"
ENV_REFERENCE = re.compile(r"os\.environ/([A-Za-z_][A-Za-z0-9_]*)")


def entry_points() -> list[Path]:
    """Every config: the top-level files, and the entry point of each multi-file config."""
    nested = [
        path
        for path in sorted(FIXTURES.glob("include_*/*.yaml"))
        if "Entry point" in path.read_text(encoding="utf-8").splitlines()[0]
    ]
    return sorted(FIXTURES.glob("*.yaml")) + nested


CONFIGS = entry_points()


def staged(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The config copied (with the files it includes) into tmp_path, so its store lives there,
    and every variable its files reference given a dummy value."""
    source = path.parent
    target = tmp_path / source.name
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("refused"))
    for text in (p.read_text(encoding="utf-8") for p in source.glob("*.yaml")):
        for var in ENV_REFERENCE.findall(text):
            monkeypatch.setenv(var, f"dummy-{var.lower()}")
    return target / path.name


def test_there_are_at_least_thirty_configs_each_naming_its_source() -> None:
    """The corpus holds 30+ real configs; every file starts with a comment naming its source."""
    assert len(CONFIGS) >= 30
    for path in FIXTURES.rglob("*.yaml"):
        first = path.read_text(encoding="utf-8").splitlines()[0]
        assert first.startswith("# Source: "), path.name


def test_the_corpus_covers_every_case_the_issue_names() -> None:
    """Anchors and merge keys, CRLF, include:, env refs in lists and nested dicts, wildcards,
    model_group_alias and an upper-case log_level each appear in at least one real config."""
    texts = {path.name: path.read_bytes() for path in FIXTURES.rglob("*.yaml")}

    def some(predicate: object) -> bool:
        return any(predicate(text) for text in texts.values())  # type: ignore[operator]

    assert some(lambda t: b"<<: *" in t and b"&" in t)
    assert some(lambda t: b"\r\n" in t)
    assert some(lambda t: re.search(rb"^include:", t, re.M))
    assert some(
        lambda t: re.search(rb"^\s+- custom_llm_provider: .*\n\s+api_key: os\.environ/", t, re.M)
    )
    assert some(lambda t: re.search(rb"^\s{4,}\w+: os\.environ/", t, re.M))
    assert some(lambda t: b'model_name: "openai/*"' in t)
    assert some(lambda t: b"model_group_alias" in t)
    assert some(lambda t: b'log_level: "DEBUG"' in t)
    assert some(lambda t: re.search(rb"^\s+model: os\.environ/", t, re.M))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_check_config_accepts(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`overspill check-config` exits 0 on the config; no warning repeats a variable's value."""
    config = staged(path, tmp_path, monkeypatch)
    assert main(["check-config", str(config)]) == 0
    out, err = capsys.readouterr()
    assert ": ok (" in out
    assert "dummy-" not in err


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
async def test_startup_builds_the_app_and_it_answers_health(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The app the server builds from the config starts, is live and ready, and lists its
    models (configured names and visible aliases) on /v1/models."""
    config = staged(path, tmp_path, monkeypatch)
    loaded = load_config(config)
    for key, value in loaded.environment.items():
        monkeypatch.setenv(key, value)  # restored afterwards; the server sets them for real
    monkeypatch.setenv(CONFIG_ENV, str(config))
    monkeypatch.setattr(logs, "configure", lambda *levels: None)
    monkeypatch.setattr(gc, "freeze", lambda: None)
    app = server.app_from_env()
    master = loaded.settings.general_settings.master_key
    headers = {"authorization": f"Bearer {master.get_secret_value()}"} if master else {}
    transport = httpx.ASGITransport(app=app)
    async with (
        running(app),
        httpx.AsyncClient(transport=transport, base_url="http://o.test", headers=headers) as client,
    ):
        assert (await client.get("/health/liveness")).status_code == 200
        ready = await client.get("/health/readiness")
        assert ready.status_code == 200, ready.text
        assert ready.json()["models"] == len(loaded.settings.model_names())
        if any(e.litellm_params.model.startswith("ollama") for e in loaded.settings.model_list):
            return  # /v1/models would ask each Ollama server for its window
        listed = {m["id"] for m in (await client.get("/v1/models")).json()["data"]}
    assert set(loaded.settings.model_names()) <= listed
    visible = {
        a for a, i in loaded.settings.router_settings.model_group_alias.items() if not i.hidden
    }
    assert visible <= listed
    assert os.environ[CONFIG_ENV] == str(config)


def test_a_config_litellm_refuses_is_refused_with_its_yaml_path() -> None:
    """An entry without litellm_params stops LiteLLM's proxy too (KeyError in
    Router.set_model_list); overspill names the YAML path instead."""
    with pytest.raises(ConfigError) as caught:
        load_config(FIXTURES / "refused" / "litellm_langfuse_config.yaml", env={})
    assert caught.value.problems == ["model_list[0].litellm_params: field required"]


@pytest.mark.parametrize(
    "name",
    [
        "azpepoze_litellm_llamacpp_setup_crlf.yaml",
        "include_two/config_with_multiple_includes.yaml",
        "gapminder_ai_wildcard.yaml",
    ],
)
def test_the_real_command_accepts(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`overspill check-config` (`python -m cli`) in a real process exits 0 and lists the models."""
    config = staged(FIXTURES / name, tmp_path, monkeypatch)
    done = subprocess.run(
        [sys.executable, "-m", "cli", "check-config", str(config)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    names = load_config(config).settings.model_names()
    assert all(name in done.stdout for name in names)
    assert not any(is_wildcard(n) for n in names) or "*" in done.stdout
