"""What the history splice saves on a long real conversation: the same scripted conversation
(canned assistant turns, `max_tokens: 1`) through `overspill serve` in front of the real
llama-server (`make model`, 2,048-token window), once with `[overflow_recovery]` and once with
`[history_splice, overflow_recovery]`; prints upstream calls, failed calls and the prompt
tokens the upstream processed. The splice decision's CPU is bench/micro/test_splice.py's.

    .venv/bin/python -m bench.splice_e2e [--turns 100]    # ~15 minutes
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from pathlib import Path
from typing import Any


def end_to_end(turns: int) -> None:
    """Upstream calls and tokens for a long conversation, without and with the splice."""
    from tests.e2e.conftest import local_config, running_llama_server, serve

    with tempfile.TemporaryDirectory() as tmp, running_llama_server(Path(tmp)) as upstream_url:
        layer_sets = ("[overflow_recovery]", "[history_splice, overflow_recovery]")
        for index, layers in enumerate(layer_sets):
            workdir = Path(tmp) / f"overspill-{index}"
            workdir.mkdir()
            config = local_config(upstream_url, layers)
            with contextlib.contextmanager(serve)(config, workdir, upstream_url) as served:
                _converse(served, turns, layers)


def _converse(served: Any, turns: int, layers: str) -> None:
    client = served.client()
    messages: list[Any] = [{"role": "system", "content": "You are a helpful assistant."}]
    calls = failed = prompt_tokens = 0
    started = time.monotonic()
    for turn in range(turns):
        messages.append(
            {
                "role": "user",
                "content": f"Turn {turn}: hull, engines, radio fine. Code K-{turn:03d}.",
            }
        )
        raw = client.chat.completions.with_raw_response.create(
            model="local", messages=messages, max_tokens=1, temperature=0,
            extra_headers={"X-Conversation-Id": "bench-" + layers.strip("[]").replace(", ", "-")},
        )  # fmt: skip
        completion_ = raw.parse()
        attempts = int(raw.headers.get("x-overspill-attempts", "1"))
        calls += attempts + int(raw.headers.get("x-overspill-extraction-calls", "0"))
        failed += attempts - 1
        prompt_tokens += completion_.usage.prompt_tokens if completion_.usage else 0
        messages.append(
            {
                "role": "assistant",
                "content": f"Noted for turn {turn}: hull, engines, radio fine; code K-{turn:03d}.",
            }
        )
    print(
        f"{layers:<38} turns={turns} upstream calls={calls} failed (overflow) calls={failed} "
        f"prompt tokens processed={prompt_tokens} wall={time.monotonic() - started:.0f}s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, default=100)
    end_to_end(parser.parse_args().turns)


if __name__ == "__main__":
    main()
