"""Claude Code itself (the npm package, `make claude`) through `overspill serve`, with no network
but overspill: `claude -p` runs a task that calls its Read tool, and a session that outgrows
the model's window completes with compaction visible in overspill's metrics and log, no call
failed.

The model is scripted (tests/e2e/agent_upstream.py: a real HTTP server that refuses prompts
over its window, as llama-server does): the local 135M model cannot drive an agent, and
Claude Code's own system prompt and tools (~10k tokens) do not fit its 2048-token window.
Everything else is real: Claude Code's requests, overspill's Messages surface and layers, the
translation to chat completions, the upstream's streams.
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
"""The bound on one `claude -p` run (the box may be loaded)."""
QUIET = {
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_BUG_COMMAND": "1",
    "DISABLE_COST_WARNINGS": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
    "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
    "CLAUDE_CODE_SKIP_PROMPT_HISTORY": "1",
}
"""Claude Code's switches for telemetry, error reports, updates and other traffic."""


def claude_binary() -> str:
    """The pinned Claude Code (installed on first use by scripts/claude-code.sh)."""
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "claude-code.sh")],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip().removeprefix("CLAUDE=")


def config(upstream: str, window: int) -> str:
    """Claude's model names on the scripted model, its window known, the default layers."""
    return f"""
model_list:
  - model_name: "claude-*"
    litellm_params: {{model: openai/agent, api_base: {upstream}, timeout: 120}}
    context: {{window: {window}}}
general_settings:
  master_key: {MASTER_KEY}
  max_body_bytes: 4000000
  store: {{path: store}}
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A working directory with source files to read."""
    work = tmp_path / "project"
    work.mkdir()
    return work


def write_files(work: Path, count: int, lines: int) -> list[str]:
    """`count` files of `lines` numbered lines of code each; their paths."""
    paths = []
    for n in range(count):
        path = work / f"module_{n}.py"
        path.write_text(
            "".join(f"value_{n}_{k} = compute({n}, {k})  # step {k}\n" for k in range(lines))
        )
        paths.append(str(path))
    return paths


def claude(served: Served, work: Path, prompt: str) -> subprocess.CompletedProcess[str]:
    """`claude -p prompt` in `work`, pointed at overspill, no other network, bounded."""
    home = work.parent / "home"
    home.mkdir(exist_ok=True)
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": served.base_url,
        "ANTHROPIC_AUTH_TOKEN": MASTER_KEY,
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "2048",
        "HTTPS_PROXY": "http://127.0.0.1:9",  # anything but overspill goes nowhere
        "HTTP_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "127.0.0.1,localhost",
        **QUIET,
    }
    return subprocess.run(
        [claude_binary(), "-p", prompt, "--output-format", "text"],
        cwd=work, env=env, capture_output=True, text=True, timeout=RUN_SECONDS,
    )  # fmt: skip


@pytest.fixture
def short(tmp_path: Path, project: Path) -> Iterator[tuple[Served, AgentUpstream, list[str]]]:
    """overspill before the scripted model with room to spare, and one file to read."""
    files = write_files(project, 1, 20)
    with agent_upstream(files, window=200_000) as (url, script):
        for served in serve(config(url, 200_000), tmp_path, url):
            yield served, script, files


@pytest.fixture
def long(tmp_path: Path, project: Path) -> Iterator[tuple[Served, AgentUpstream, list[str]]]:
    """overspill before a scripted model with a 24k-token window, and files worth ~30k."""
    files = write_files(project, 10, 200)
    with agent_upstream(files, window=24_000) as (url, script):
        for served in serve(config(url, 24_000), tmp_path, url):
            yield served, script, files


def test_claude_p_runs_a_task_with_a_tool_call(
    short: tuple[Served, AgentUpstream, list[str]], project: Path
) -> None:
    """`claude -p` asks the model, runs the Read tool it called, sends the result back through
    overspill, and prints the model's last answer."""
    served, script, _ = short
    done = claude(served, project, "Read the module and tell me when you are done.")
    assert done.returncode == 0, done.stderr[-2000:]
    assert DONE in done.stdout
    turns = [seen for seen in script.seen if seen.tools]
    assert len(turns) >= 2
    assert "compute(0, 0)" in turns[-1].last  # the file's content came back as the tool result
    assert not any(seen.refused for seen in script.seen)
    statuses = served.statuses("messages")
    assert statuses
    assert all(status == 200 for status in statuses)


def test_a_session_past_the_window_completes_with_compaction(
    long: tuple[Served, AgentUpstream, list[str]], project: Path
) -> None:
    """Ten files whose contents together outgrow the model's window: every call succeeds,
    old results are masked and the history compacted (metrics and log say so), and the
    session ends with the model's answer."""
    served, script, files = long
    done = claude(served, project, "Read every module, one by one, then say you are done.")
    assert done.returncode == 0, done.stderr[-2000:]
    assert DONE in done.stdout
    assert not any(seen.refused for seen in script.seen)
    turns = [seen for seen in script.seen if seen.tools]
    assert len(turns) >= len(files) + 1
    whole = turns[0].tokens + sum(count_text(Path(f).read_text()) for f in files)
    assert whole > 24_000 * 1.5  # sent whole, the session would be far past the window
    statuses = served.statuses("messages")
    assert statuses
    assert all(status == 200 for status in statuses)
    assert served.metric("overspill_masked_tool_results_total") > 0
    compacted = served.metric("overspill_splices_total") + served.metric(
        "overspill_extractions_total"
    )
    assert compacted > 0
    assert any("tool-results-masked" in line for line in served.log_lines())
