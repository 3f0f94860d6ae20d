"""A long conversation sent two ways to a running overspill: as a Responses API chain (turn by
turn by previous_response_id) and as chat completions (the whole history every turn), each as
its own tenant, with client-side tool exchanges among the turns and a needle early on.

Prints, per API: turns, upstream calls refused (overspill's /metrics), turns that waited for a
compaction, turns spliced, and whether the model's last answer (to "what is the vault code?")
names the needle. Run it against `make run`'s overspill (or any config whose master key and
two client keys are given):

    python scripts/responses_chain.py --url http://127.0.0.1:4000 --turns 200 \\
        --master sk-master --keys sk-responses,sk-chat --model local
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from typing import Any

import httpx

NEEDLE = "4471"


def user_line(turn: int) -> str:
    """The user's report for `turn` (the needle on turn 3)."""
    fact = f"the vault code is {NEEDLE}" if turn == 3 else f"nothing new happened on day {turn}"
    return f"Day {turn} report: {fact}. The crew worked on the hull, the engines and the radio."


def tool_exchange(turn: int) -> tuple[str, str, str]:
    """The tool call an agent ran on `turn`: its id, its arguments, and its output."""
    return f"call_{turn}", f'{{"day": {turn}}}', f"log of day {turn}: all quiet"


def tool_items(turn: int) -> list[dict[str, Any]]:
    """The tool exchange of `turn` as Responses input items."""
    call, arguments, output = tool_exchange(turn)
    return [
        {"type": "function_call", "call_id": call, "name": "read_log", "arguments": arguments},
        {"type": "function_call_output", "call_id": call, "output": output},
    ]


def tool_messages(turn: int) -> list[dict[str, Any]]:
    """The tool exchange of `turn` as chat messages."""
    call, arguments, output = tool_exchange(turn)
    function = {"name": "read_log", "arguments": arguments}
    called = {"id": call, "type": "function", "function": function}
    return [
        {"role": "assistant", "content": None, "tool_calls": [called]},
        {"role": "tool", "tool_call_id": call, "content": output},
    ]


def refused(http: httpx.Client, master: str) -> float:
    """Upstream calls that failed, from overspill's metrics."""
    text = http.get("/metrics", headers={"authorization": f"Bearer {master}"}).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("overspill_upstream_failures_total{")
    )


def responses_run(http: httpx.Client, key: str, model: str, turns: int) -> tuple[Counter[str], str]:
    """The chain; the actions overspill reported, and the last answer."""
    headers = {"authorization": f"Bearer {key}"}
    previous: str | None = None
    seen: Counter[str] = Counter()
    answer = ""
    for turn in range(turns + 1):
        last = turn == turns
        text = "What is the vault code? Answer with the number." if last else user_line(turn)
        items: list[dict[str, Any]] = tool_items(turn) if turn % 9 == 8 else []
        items.append({"role": "user", "content": text})
        body = {
            "model": model,
            "input": items,
            "max_output_tokens": 16 if last else 4,
            "temperature": 0,
        }
        if previous:
            body["previous_response_id"] = previous
        response = http.post("/v1/responses", json=body, headers=headers)
        response.raise_for_status()
        count(seen, response.headers)
        made = response.json()
        previous = made["id"]
        answer = "".join(
            part.get("text", "")
            for item in made["output"]
            if item.get("type") == "message"
            for part in item["content"]
        )
    return seen, answer


def chat_run(http: httpx.Client, key: str, model: str, turns: int) -> tuple[Counter[str], str]:
    """The same conversation sent whole each turn; the actions, and the last answer."""
    headers = {"authorization": f"Bearer {key}"}
    history: list[dict[str, Any]] = []
    seen: Counter[str] = Counter()
    answer = ""
    for turn in range(turns + 1):
        last = turn == turns
        if turn % 9 == 8:
            history += tool_messages(turn)
        text = "What is the vault code? Answer with the number." if last else user_line(turn)
        history.append({"role": "user", "content": text})
        body = {
            "model": model,
            "messages": history,
            "max_tokens": 16 if last else 4,
            "temperature": 0,
        }
        response = http.post("/v1/chat/completions", json=body, headers=headers)
        response.raise_for_status()
        count(seen, response.headers)
        answer = response.json()["choices"][0]["message"]["content"] or ""
        history.append({"role": "assistant", "content": answer})
    return seen, answer


def count(seen: Counter[str], headers: httpx.Headers) -> None:
    """Tally what overspill said it did on one turn."""
    seen["turns"] += 1
    action = headers.get("x-overspill-action", "sent")
    seen["spliced" if action.startswith("spliced") else action] += 1
    if "x-overspill-waited" in headers:
        seen["waited"] += 1
    if headers.get("x-overspill-compaction") == "scheduled":
        seen["growths scheduled"] += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:4000")
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--model", default="local")
    parser.add_argument("--master", default="sk-master")
    parser.add_argument("--keys", default="sk-responses,sk-chat")
    args = parser.parse_args()
    responses_key, chat_key = args.keys.split(",")
    with httpx.Client(base_url=args.url, timeout=600) as http:
        for name, run, key in (
            ("responses", responses_run, responses_key),
            ("chat", chat_run, chat_key),
        ):
            before, started = refused(http, args.master), time.monotonic()
            seen, answer = run(http, key, args.model, args.turns)
            failed = refused(http, args.master) - before
            print(
                f"{name:9} turns {seen['turns']}, refused upstream calls {failed:g}, "
                f"waited {seen['waited']}, spliced {seen['spliced']}, "
                f"growths scheduled {seen['growths scheduled']}, "
                f"needle recalled {NEEDLE in answer} ({answer.strip()[:60]!r}), "
                f"{time.monotonic() - started:.0f} s"
            )


if __name__ == "__main__":
    main()
