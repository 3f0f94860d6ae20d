"""OpenAI's Codex CLI itself (the npm package with its Rust binary, `make codex`) through
`overspill serve`'s Responses API, with no network but overspill: `codex exec` runs a task
that calls its shell tool, and a session that outgrows the model's window completes with
compaction visible in overspill's metrics and log, no call refused.

Codex speaks only the Responses API; its config.toml (an isolated CODEX_HOME) defines a model
provider at overspill's /v1 with `wire_api = "responses"`, updates, analytics, feedback and
telemetry off, and OpenAI's own tools (web search, the sub-agent namespace) off: a model
reached through chat completions calls function tools only.

The model is scripted (tests/e2e/agent_upstream.py: a real HTTP server speaking chat
completions that refuses prompts over its window, as llama-server does; it reads files with
Codex's `exec_command`, its arguments built from the tool's schema): the local 135M model
cannot drive an agent. Everything else is real: Codex, its requests and its shell, overspill
serve, the Responses surface and the layers, the translation of Responses to chat
completions and of the upstream's streams back to Responses events.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernel.tokens import count_text
from tests.e2e.agent_upstream import DONE, AgentUpstream, agent_upstream
from tests.e2e.conftest import MASTER_KEY, ROOT, Served, serve

pytestmark = pytest.mark.e2e

RUN_SECONDS = 300
"""The bound on one `codex exec` run (the box may be loaded)."""
INSTALL_SECONDS = 600
"""The bound on installing Codex (npm) on first use and checking its version."""
KEY_ENV = "OVERSPILL_API_KEY"
"""The variable the provider's `env_key` names: overspill's key reaches Codex through it."""
WINDOW = 12_000
"""The scripted model's window in the long session: Codex's instructions and tools take ~6k."""


def codex_binary() -> str:
    """The pinned Codex (installed on first use by scripts/codex.sh)."""
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "codex.sh")],
        check=True, capture_output=True, text=True, timeout=INSTALL_SECONDS,
    )  # fmt: skip
    return out.stdout.strip().removeprefix("CODEX=")


def config(upstream: str, window: int) -> str:
    """overspill's model `agent` on the scripted model, its window known, the default layers."""
    return f"""
model_list:
  - model_name: agent
    litellm_params: {{model: openai/agent, api_base: {upstream}, timeout: 120}}
    context: {{window: {window}}}
general_settings:
  master_key: {MASTER_KEY}
  max_body_bytes: 4000000
  store: {{path: store}}
"""


def codex_config(served: Served) -> str:
    """Codex's config.toml: overspill its one provider, a read-only sandbox, no approvals."""
    return f"""
model = "agent"
model_provider = "overspill"
approval_policy = "never"
sandbox_mode = "read-only"
check_for_update_on_startup = false
web_search = "disabled"

[features]
multi_agent = false

[model_providers.overspill]
name = "overspill"
base_url = "{served.base_url}/v1"
wire_api = "responses"
env_key = "{KEY_ENV}"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false

[feedback]
enabled = false

[otel]
exporter = "none"
trace_exporter = "none"
metrics_exporter = "none"
log_user_prompt = false
"""


def codex(served: Served, work: Path, prompt: str) -> subprocess.CompletedProcess[str]:
    """`codex exec prompt` in `work`, pointed at overspill, no other network, bounded."""
    home = work.parent / "codex-home"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(codex_config(served))
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "CODEX_HOME": str(home),
        KEY_ENV: MASTER_KEY,
        "OPENAI_API_KEY": "sk-unused",  # the provider's env_key wins; OpenAI is never asked
        "HTTPS_PROXY": "http://127.0.0.1:9",  # anything but overspill goes nowhere
        "HTTP_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    return subprocess.run(
        [codex_binary(), "exec", "--strict-config", "--skip-git-repo-check", "--ephemeral",
         "--color", "never", "-C", str(work), prompt],
        cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=RUN_SECONDS,
    )  # fmt: skip


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A working directory with notes to read."""
    work = tmp_path / "project"
    work.mkdir()
    return work


def write_notes(work: Path, count: int, lines: int) -> list[str]:
    """`count` files notes-<k>.txt of `lines` numbered lines each; their names."""
    names = []
    for n in range(count):
        name = f"notes-{n}.txt"
        notes = (f"note {n}.{k}: the value of item {k} is {n * 1000 + k}\n" for k in range(lines))
        (work / name).write_text("".join(notes))
        names.append(name)
    return names


@pytest.fixture
def short(tmp_path: Path, project: Path) -> Iterator[tuple[Served, AgentUpstream, list[str]]]:
    """overspill before the scripted model with room to spare, and one file to read."""
    files = write_notes(project, 1, 20)
    with agent_upstream(files, window=200_000) as (url, script):
        for served in serve(config(url, 200_000), tmp_path, url):
            yield served, script, files


@pytest.fixture
def long(tmp_path: Path, project: Path) -> Iterator[tuple[Served, AgentUpstream, list[str]]]:
    """overspill before a scripted model with a small window, and files worth far more."""
    files = write_notes(project, 8, 150)
    with agent_upstream(files, window=WINDOW) as (url, script):
        for served in serve(config(url, WINDOW), tmp_path, url):
            yield served, script, files


def test_codex_exec_runs_a_task_with_a_tool_call(
    short: tuple[Served, AgentUpstream, list[str]], project: Path
) -> None:
    """`codex exec` runs the model's shell call and sends its output back through overspill."""
    served, script, _ = short
    done = codex(served, project, "Read the notes and tell me when you are done.")
    assert done.returncode == 0, done.stderr[-3000:]
    assert DONE in done.stdout
    turns = [seen for seen in script.seen if seen.tools]
    assert len(turns) >= 2
    assert "note 0.0: the value of item 0 is 0" in turns[-1].last  # the command's output
    assert not any(seen.refused for seen in script.seen)
    statuses = served.statuses("responses")
    assert len(statuses) >= 2
    assert all(status == 200 for status in statuses)


def test_a_session_past_the_window_completes_with_compaction(
    long: tuple[Served, AgentUpstream, list[str]], project: Path
) -> None:
    """Eight files past the window: no call refused, outputs masked, history spliced, done."""
    served, script, files = long
    done = codex(served, project, "Read every notes file, one by one, then say you are done.")
    assert done.returncode == 0, done.stderr[-3000:]
    assert DONE in done.stdout
    assert not any(seen.refused for seen in script.seen)
    turns = [seen for seen in script.seen if seen.tools]
    assert len(turns) >= len(files) + 1
    whole = turns[0].tokens + sum(count_text((project / f).read_text()) for f in files)
    assert whole > WINDOW * 1.5  # sent whole, the session would be far past the window
    statuses = served.statuses("responses")
    assert statuses
    assert all(status == 200 for status in statuses)
    assert served.metric("overspill_masked_tool_results_total") > 0
    compacted = served.metric("overspill_splices_total") + served.metric(
        "overspill_extractions_total"
    )
    assert compacted > 0
    logged = [line.replace(" ", "") for line in served.log_lines()]
    assert any("tool-results-masked" in line for line in logged)
    assert any('"action":"spliced' in line for line in logged)  # an extraction stood in
