"""How llama.cpp's flash attention changes the local model's speed on the CPU: on and off, one run.

    .venv/bin/python -m bench.model_attention            # about two minutes on 2 cores
    .venv/bin/python -m bench.model_attention --qwen     # Qwen2.5-Coder-0.5B weights

`make run` and `make test` start llama-server with `-fa off`. This starts it (two slots,
`--threads` threads, `scripts/local-model.sh`'s weights) with flash attention on, then off,
and times three shapes the same way on each:

    conversation  a prompt grown 50 tokens a turn for `--turns` turns, prefix cache on, 4
                  tokens written: what a conversation through overspill asks of the model
    cold          the last of those prompts read once with the cache off, 4 tokens written
    decode        the same prompt, cached, then 128 tokens written

Printed: seconds per shape with each setting and off's time as a share of on's (measured in
this run).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from bench.compaction import llama_server, model_paths

TURN = (
    "Day {n} report: nothing new happened on day {n}. The crew worked on the hull, the "
    "engines, the radio, the galley and the cargo hold; the sea was calm all day."
)
"""One turn of the grown prompt (about 50 tokens)."""


def complete(url: str, prompt: str, written: int, cache: bool) -> None:
    """One /completion call at temperature 0 that writes exactly `written` tokens."""
    body = {
        "prompt": prompt, "n_predict": written, "cache_prompt": cache, "temperature": 0,
        "ignore_eos": True,
    }  # fmt: skip
    httpx.post(url.removesuffix("/v1") + "/completion", json=body, timeout=600).raise_for_status()


def shapes(url: str, turns: int) -> dict[str, float]:
    """Seconds for each shape on the server at `url`."""
    prompts = [" ".join(TURN.format(n=n) for n in range(upto + 1)) for upto in range(turns)]

    def timed(run: Callable[[], None]) -> float:
        started = time.monotonic()
        run()
        return time.monotonic() - started

    def conversation() -> None:
        for prompt in prompts:
            complete(url, prompt, 4, cache=True)

    complete(url, "warm up", 4, cache=False)
    figures = {
        "conversation": timed(conversation),
        "cold": timed(lambda: complete(url, prompts[-1], 4, cache=False)),
    }
    complete(url, prompts[-1], 1, cache=True)
    figures["decode"] = timed(lambda: complete(url, prompts[-1], 128, cache=True))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--qwen", action="store_true", help="Qwen2.5-Coder-0.5B's weights")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--turns", type=int, default=30, help="the conversation's length")
    args = parser.parse_args()
    binary, weights = model_paths(qwen=args.qwen)
    measured: dict[bool, dict[str, float]] = {}
    for flash in (True, False):
        with (
            tempfile.TemporaryDirectory() as tmp,
            llama_server(binary, weights, 2048, Path(tmp), args.threads, flash) as url,
        ):
            measured[flash] = shapes(url, args.turns)
    print(f"{Path(weights).name}, {args.threads} threads: seconds, flash attention on and off")
    print(f"{'shape':<13} {'on':>8} {'off':>8} {'off/on':>7}")
    for shape, on in measured[True].items():
        off = measured[False][shape]
        print(f"{shape:<13} {on:>8.1f} {off:>8.1f} {off / on:>7.2f}")


if __name__ == "__main__":
    main()
