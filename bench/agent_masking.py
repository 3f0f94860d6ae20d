"""What an agent's loop reads again as its old tool results are masked: a task and rounds of
file reads (~260 tokens each), each round sent whole through `overspill serve` in front of the
real llama-server (SmolLM2, `--jinja`, one slot whose prompt cache serves a request's prefix).
Prints, per round, the prompt tokens, how many the upstream read from its cache, how many it
read anew and how many results were masked; then the tokens read anew over the rounds.

Past `context.mask_at` of the budget the old results go as placeholders, in batches: a round
that masks a new batch makes the upstream read again from the first newly masked result on
(the kept results and everything after), a round between batches reads only what it added.
The fewer and steadier the batches, the less is read again. Background growths are off, so a
growth is an inline extraction on the round that needs it (`spliced+extracted`).

    .venv/bin/python -m bench.agent_masking [--rounds 40] [--window 8192]    # ~5 minutes
"""

from __future__ import annotations

import argparse
from typing import Any

from bench.agent_quote import row, serving

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]


def a_round(messages: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """One more round of the loop: the model reads a module (a result of ~260 tokens)."""
    arguments = f'{{"path": "src/module_{n}.py"}}'
    call = {"id": f"call-{n}", "type": "function",
            "function": {"name": "read_file", "arguments": arguments}}  # fmt: skip
    lines = (f"def handler_{n}_{k}(request): return respond({k}, request)" for k in range(14))
    return [
        *messages,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {
            "role": "tool",
            "tool_call_id": f"call-{n}",
            "content": f"# module {n}\n" + "\n".join(lines),
        },
    ]


def run(rounds: int, window: int) -> None:
    """The loop through a fresh overspill and llama-server; prints one line a round."""
    with serving(window) as served:
        client = served.client()
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Read the modules one by one; which handler is slow?"},
        ]
        anew = 0
        print("round  action              prompt  cached  read anew  masked")
        for n in range(rounds + 1):
            raw = client.chat.completions.with_raw_response.create(
                model="local", messages=messages, max_tokens=1, temperature=0, tools=TOOLS,
                extra_headers={"X-Conversation-Id": "bench-agent-masking"},
            )  # fmt: skip
            _, read = row(n, raw, "tool-results-masked")
            anew += read if n else 0
            messages = a_round(messages, n)
        print(f"read anew over rounds 1-{rounds}: {anew} tokens")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--window", type=int, default=8192)
    args = parser.parse_args()
    run(args.rounds, args.window)


if __name__ == "__main__":
    main()
