"""A scripted coding model behind an OpenAI-wire HTTP server, for driving a real agent (Claude
Code, Codex) through overspill where the local 135M model cannot: it reads a list of files,
one tool call per turn, then says it is done.

It reads with the tool the agent offers: the tool is picked from the request's `tools` by
name (Claude Code's `Read`; Codex's `exec_command` or `shell`, which run `cat`) and its
arguments are built from that tool's JSON schema (`file_path`; `cmd` as a string or
`command` as an array or a string).
It behaves as a real server with a `window`-token context would: a prompt (messages and tool
definitions, counted with cl100k) over the window is refused with llama-server's own 400, so
a session that outgrows the window fails unless overspill keeps it inside. Its next step
depends only on the request's last message that is not a system message (the task → the
first file; the result of the call for file k → file k+1), so a spliced or masked
conversation drives it the same way.
Requests without tools (overspill's extraction calls, the agent's side calls) get a short
text. Every request is recorded with its prompt size and whether it was refused.
"""

from __future__ import annotations

import json
import re
import shlex
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from kernel.tokens import count_messages, count_text
from tests.e2e.serving import serving

DONE = "All files are read."
_CALL = re.compile(r"call_read_(\d+)")
READERS = ("Read", "exec_command", "shell")
"""The tools the script reads a file with, by name, in order of preference."""


@dataclass
class Seen:
    """One request the upstream answered."""

    tokens: int
    tools: bool
    refused: bool
    last: str


@dataclass
class AgentUpstream:
    """The script: the files to read, the window, and what was asked."""

    files: list[str]
    window: int
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any] | None, list[bytes]]:
        """(status, JSON body or None, SSE events) for one request."""
        messages = body.get("messages") or []
        tools = body.get("tools") or []
        written = json.dumps(tools, separators=(",", ":"))  # as overspill writes them
        tokens = count_messages(messages) + (count_text(written) if tools else 0)
        spoken = [m for m in messages if m.get("role") != "system"]
        last = spoken[-1] if spoken else {}
        refused = tokens > self.window
        with self.lock:
            self.seen.append(Seen(tokens, bool(tools), refused, str(last.get("content"))[:200]))
        if refused:
            error = {
                "code": 400,
                "message": f"request ({tokens} tokens) exceeds the available context size "
                f"({self.window} tokens), try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": tokens,
                "n_ctx": self.window,
            }
            return 400, {"error": error}, []
        step = self._next(last) if tools else None
        message: dict[str, Any]
        if step is None or step >= len(self.files):
            text = DONE if tools else "- The agent read the project's files one by one."
            message = {"role": "assistant", "content": text}
            finish = "stop"
        else:
            name, arguments = read_call(tools, self.files[step])
            call = {"id": f"call_read_{step}", "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)}}  # fmt: skip
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            finish = "tool_calls"
        usage = {"prompt_tokens": tokens, "completion_tokens": 8, "total_tokens": tokens + 8}
        if not body.get("stream"):
            choice = {"index": 0, "message": message, "finish_reason": finish}
            made = {"id": "chatcmpl-agent", "object": "chat.completion", "created": 0,
                    "model": body.get("model"), "choices": [choice], "usage": usage}  # fmt: skip
            return 200, made, []
        return 200, None, _events(message, finish, usage)

    @staticmethod
    def _next(last: dict[str, Any]) -> int | None:
        """The file to read next: after the result of call k, k + 1; after a user's words, 0."""
        if last.get("role") == "tool":
            found = _CALL.search(str(last.get("tool_call_id")))
            return int(found.group(1)) + 1 if found else None
        return 0 if last.get("role") == "user" else None


def read_call(tools: list[dict[str, Any]], path: str) -> tuple[str, dict[str, Any]]:
    """The name and arguments of a call that reads `path` with one of the offered tools."""
    offered = {
        tool["function"]["name"]: tool["function"].get("parameters") or {}
        for tool in tools
        if tool.get("type") == "function"
    }
    for name in READERS:
        if name in offered:
            return name, _arguments(offered[name].get("properties") or {}, path)
    raise LookupError(f"none of {READERS} among the offered tools {sorted(offered)}")


def _arguments(properties: dict[str, Any], path: str) -> dict[str, Any]:
    """A file reader's arguments as its schema names them: a path, or a `cat` command."""
    if "file_path" in properties:
        return {"file_path": path}
    for key in ("cmd", "command"):
        if key in properties:
            array = properties[key].get("type") == "array"
            return {key: ["cat", path] if array else f"cat {shlex.quote(path)}"}
    raise LookupError(f"no path or command among the tool's parameters {sorted(properties)}")


def _events(message: dict[str, Any], finish: str, usage: dict[str, Any]) -> list[bytes]:
    def chunk(delta: dict[str, Any], reason: str | None = None, **extra: Any) -> bytes:
        event = {"id": "chatcmpl-agent", "object": "chat.completion.chunk", "created": 0,
                 "model": "agent", "choices": [{"index": 0, "delta": delta,
                                                "finish_reason": reason}], **extra}  # fmt: skip
        return b"data: " + json.dumps(event).encode() + b"\n\n"

    out = [chunk({"role": "assistant", "content": ""})]
    if message.get("tool_calls"):
        call = message["tool_calls"][0]
        out.append(chunk({"tool_calls": [{"index": 0, **call}]}))
    else:
        out.append(chunk({"content": message["content"]}))
    out.append(chunk({}, finish))
    out.append(chunk({}, None, choices=[], usage=usage))
    out.append(b"data: [DONE]\n\n")
    return out


def _handler(upstream: AgentUpstream) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the test reads what `AgentUpstream.seen` recorded."""

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            status, made, events = upstream.answer(body)
            if made is not None:
                data = json.dumps(made).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            data = b"".join(events)
            self.send_response(status)
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


@contextmanager
def agent_upstream(files: list[str], window: int) -> Iterator[tuple[str, AgentUpstream]]:
    """The scripted model on a free loopback port: its /v1 URL and its record."""
    script = AgentUpstream(files, window)
    with serving(_handler(script)) as url:
        yield url, script
