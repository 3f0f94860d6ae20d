"""Token estimates against a real model's count: tiktoken's count of varied conversations beside
the `usage.prompt_tokens` llama-server (SmolLM2, `make model`) reports, raw and after the
per-model calibration has seen the previous conversations (what history_splice learns in
production). The planning CPU this file used to time is bench/micro/test_splice.py's
`recovery` cases.

    .venv/bin/python -m bench.estimates [--prompts 30]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

import httpx

from kernel.calibration import ratio, sample
from kernel.tokens import count_messages

WORDS = ["hull", "engine", "radio", "Lisbon", "ZX-4471", "March", "captain", "report", "fuel"]


def conversation(size: int, words: int = 60, seed: int = 0) -> list[dict[str, Any]]:
    """A system prompt and `size - 1` alternating turns."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful assistant."}]
    for i in range(size - 1):
        text = " ".join(WORDS[(i * 3 + j + seed) % len(WORDS)] for j in range(words))
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"{i}. {text}"})
    return messages


def estimates(count: int) -> None:
    """tiktoken vs llama-server's prompt_tokens, raw and calibrated, over varied prompts."""
    from tests.e2e.conftest import running_llama_server

    with tempfile.TemporaryDirectory() as tmp, running_llama_server(Path(tmp), 4096) as url:
        _compare(f"{url}/chat/completions", count)


def _compare(url: str, count: int) -> None:
    samples: list[float] = []
    raw_errors, calibrated_errors = [], []
    with httpx.Client(timeout=120) as client:
        for index in range(count):
            messages = conversation(4 + (index * 7) % 40, words=10 + (index * 13) % 50, seed=index)
            reply = client.post(url, json={"messages": messages, "max_tokens": 1, "temperature": 0})
            reported = int(reply.json()["usage"]["prompt_tokens"])
            estimate = count_messages(messages, "smollm2")
            calibrated = estimate * ratio(samples)
            raw_errors.append((estimate - reported) / reported)
            if index >= 3:
                calibrated_errors.append((calibrated - reported) / reported)
            found = sample(estimate, reported)
            if found is not None:
                samples.insert(0, found)

    def pct(values: list[float]) -> str:
        mean = statistics.mean(values) * 100
        worst = max(values, key=abs) * 100
        return f"mean {mean:+.1f}%, worst {worst:+.1f}%"

    print(f"tiktoken vs SmolLM2 prompt_tokens over {count} prompts: raw {pct(raw_errors)}")
    print(f"after calibration (from the 4th prompt on):          {pct(calibrated_errors)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=30)
    args = parser.parse_args()
    estimates(args.prompts)


if __name__ == "__main__":
    main()
