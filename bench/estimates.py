"""One-strike recovery figures: planning CPU, and token estimates against a real model's count.

    .venv/bin/python scripts/bench_recovery.py            # planning CPU only
    .venv/bin/python scripts/bench_recovery.py --real     # + estimates vs llama-server (SmolLM2)

Planning: budget + split (Condenser.plan) for 200- and 2,000-message histories, with the
per-message token cache cold and warm. Estimates: tiktoken's count of varied conversations
against the `usage.prompt_tokens` the real model reports, raw and after the per-model
calibration has seen the previous conversations (what history_splice learns in production).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernel.calibration import ratio, sample
from kernel.config import parse_config
from kernel.store import DiskHistoryStore
from kernel.tokens import count_messages
from kernel.types import ChatRequest, Complete
from middleware.condensing.condenser import Condenser
from tests.conftest import make_services

CONFIG = """
model_list:
  - model_name: local
    litellm_params: {model: openai/smollm2, api_base: "http://upstream.test/v1"}
    context: {window: 2048}
"""
WORDS = ["hull", "engine", "radio", "Lisbon", "ZX-4471", "March", "captain", "report", "fuel"]


def conversation(size: int, words: int = 60, seed: int = 0) -> list[dict[str, Any]]:
    """A system prompt and `size - 1` alternating turns."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful assistant."}]
    for i in range(size - 1):
        text = " ".join(WORDS[(i * 3 + j + seed) % len(WORDS)] for j in range(words))
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"{i}. {text}"})
    return messages


def no_calls(name: str) -> Complete:
    """Planning makes no model calls."""
    raise AssertionError(f"unexpected internal call to {name}")


def planning(repeats: int) -> None:
    """CPU ms for one plan over 200 and 2,000 messages, cold and warm token cache."""
    settings = parse_config(CONFIG, "bench.yaml", {}).settings
    entry = settings.model_list[0]
    with tempfile.TemporaryDirectory() as tmp:
        store = DiskHistoryStore(tmp)
        print(f"{'messages':>9}{'cold ms':>10}{'warm ms':>10}")
        for size in (200, 2000):
            messages = conversation(size)
            request = ChatRequest("local", tuple(messages), False, {"messages": messages})
            cold: list[float] = []
            warm: list[float] = []
            for _ in range(repeats):  # a fresh estimator: its token cache starts cold
                condenser = Condenser(make_services(settings, store, no_calls, {"local": 2048}))
                for bucket in (cold, warm):
                    start = time.process_time()
                    condenser.plan(request, entry, window=2048 * size // 20, scale=1.0)
                    bucket.append((time.process_time() - start) * 1000)
            print(f"{size:>9}{statistics.median(cold):>10.2f}{statistics.median(warm):>10.2f}")


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
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--real", action="store_true", help="compare with the real local model")
    parser.add_argument("--prompts", type=int, default=30)
    args = parser.parse_args()
    planning(args.repeats)
    if args.real:
        estimates(args.prompts)


if __name__ == "__main__":
    main()
