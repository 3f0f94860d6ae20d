"""What an agent's loop reads again when its question carries a quote: a long chat condensed by
`overspill serve` in front of the real llama-server (SmolLM2, `--jinja` for tool calls, one
slot whose prompt cache serves a request's prefix), then one user question whose words match
many condensed turns (the splice quotes them before it), then rounds of an agent's loop: a
tool call and its result after the same question, each round sent whole. Prints, per round,
the prompt tokens, how many the upstream read from its cache, how many it read anew, and the
turns quoted; then the tokens read anew over the rounds before the next growth.

A round the quote changed (a block picked again in the room the longer tool traffic leaves)
makes the upstream read the question and every tool result after it again; a round that sends
the block of the first reads only what the round added. Background growths are off (their
extraction calls would take the slot and its cache between rounds, whatever the quote does).

    .venv/bin/python -m bench.agent_quote [--rounds 24] [--window 8192]    # ~3 minutes
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TOPIC = (
    "the lighthouse keeper told me about the storm of {n}: the lamp held, the boat {n} "
    "was late and the gulls were loud all night"
)
FILLER = (
    "we talked about the weather, the garden and the week ahead; nothing much happened, "
    "and the tea was good as always at turn {n}"
)
QUESTION = "What did the lighthouse keeper say about the storm and the lamp?"


def conversation(turns: int) -> list[dict[str, Any]]:
    """A chat of `turns` exchanges, every third user turn about the lighthouse keeper."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."}]
    for n in range(turns):
        said = (TOPIC if n % 3 == 0 else FILLER).format(n=n)
        messages.append({"role": "user", "content": said})
        messages.append({"role": "assistant", "content": f"I see. Noted for turn {n}."})
    return messages


def a_round(messages: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """One more round of the loop: the model's tool call and the tool's result (~120 tokens)."""
    call = {"id": f"call-{n}", "type": "function",
            "function": {"name": "search", "arguments": f'{{"page": {n}}}'}}  # fmt: skip
    result = f"result page {n}: " + " ".join(f"entry-{n}-{k} ok" for k in range(16))
    return [
        *messages,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call-{n}", "content": result},
    ]


def run(rounds: int, window: int, turns: int) -> None:
    """The loop through a fresh overspill and llama-server; prints one line a round."""
    with serving(window) as served:
        _loop(served, rounds, turns)


@contextlib.contextmanager
def serving(window: int) -> Iterator[Any]:
    """A real `overspill serve` (background growths off) before a real llama-server."""
    from tests.e2e.conftest import local_config, running_llama_server, serve

    with (
        tempfile.TemporaryDirectory() as tmp,
        running_llama_server(Path(tmp), window, "--jinja") as upstream_url,
    ):
        waits = "      max_wait_seconds: 300\n"
        config = local_config(upstream_url, None, window=window).replace(
            waits, waits + "      background: false\n"
        )
        workdir = Path(tmp) / "overspill"
        workdir.mkdir()
        with contextlib.contextmanager(serve)(config, workdir, upstream_url) as served:
            yield served


def row(n: int, raw: Any, header: str) -> tuple[str, int]:
    """Round `n`'s line from its raw chat answer (its action, the prompt tokens, how many the
    upstream read from its cache and anew, and the `x-overspill-<header>` it carried) and
    the action; prints the line. Returns the action and the tokens read anew."""
    usage = raw.parse().usage
    prompt = usage.prompt_tokens if usage else 0
    details = usage.prompt_tokens_details if usage else None
    cached = (details.cached_tokens or 0) if details else 0
    action = raw.headers.get("x-overspill-action", "sent")
    noted = raw.headers.get(f"x-overspill-{header}", "-")
    print(f"{n:>5}  {action:<18} {prompt:>7} {cached:>7} {prompt - cached:>10}  {noted}")
    return action, prompt - cached


def _loop(served: Any, rounds: int, turns: int) -> None:
    client = served.client()
    messages = [*conversation(turns), {"role": "user", "content": QUESTION}]
    anew = 0
    grown = False
    print("round  action              prompt  cached  read anew  quoted turns")
    for n in range(rounds + 1):
        raw = client.chat.completions.with_raw_response.create(
            model="local", messages=messages, max_tokens=1, temperature=0,
            extra_headers={"X-Conversation-Id": "bench-agent-quote"},
        )  # fmt: skip
        action, read = row(n, raw, "relevant-turns")
        grown = grown or (n > 0 and "extracted" in action)
        if n > 0 and not grown:
            anew += read
        messages = a_round(messages, n)
    print(f"read anew over the rounds before the next growth: {anew} tokens")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument("--window", type=int, default=8192)
    parser.add_argument("--turns", type=int, default=200, help="exchanges before the question")
    args = parser.parse_args()
    run(args.rounds, args.window, args.turns)


if __name__ == "__main__":
    main()
