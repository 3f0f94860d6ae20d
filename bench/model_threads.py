"""How the local model server's thread count holds up when other processes want the cores.

    .venv/bin/python -m bench.model_threads            # a few minutes on 2 cores

`make test` runs the end-to-end tests against one shared llama-server while pytest's workers
and the `overspill serve` processes they start use the same cores. llama.cpp's threads meet at
a barrier after every step and spin while they wait: one thread preempted by another process
stalls the others. This starts llama-server (SmolLM2, two slots, `scripts/local-model.sh`)
with each thread count from 1 to the machine's cores and times the same two requests at once,
the first time with the machine otherwise idle, then with one and with as many busy processes
(a Python loop each) as there are cores, then with as many at `nice 10`. Two shapes:
`generation` (a short prompt, 150 tokens written) and `prompt` (about 1,300 tokens read, 4
written). The prompt cache is off.

Printed: seconds per pair of requests, and each busy figure as a ratio of the idle one of the
same thread count (all measured in this run).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from bench.compaction import llama_server, model_paths

SHAPES = {"generation": (1, 150), "prompt": (80, 4)}
"""Each shape's prompt (repeats of a 16-token sentence) and the tokens written."""
SENTENCE = "Day report: the crew worked on the hull, the engines and the radio. "


def spin(stop: multiprocessing.synchronize.Event, niceness: int) -> None:  # pragma: no cover
    """A busy process at `niceness`: count until told to stop."""
    os.nice(niceness)
    count = 0
    while not stop.is_set():
        count += 1


@contextlib.contextmanager
def busy(processes: int, niceness: int) -> Iterator[None]:
    """`processes` busy Python processes at `niceness` for the duration."""
    stop = multiprocessing.Event()
    spinners = [
        multiprocessing.Process(target=spin, args=(stop, niceness)) for _ in range(processes)
    ]
    for spinner in spinners:
        spinner.start()
    try:
        yield
    finally:
        stop.set()
        for spinner in spinners:
            spinner.join()


def pair(url: str, repeats: int, written: int) -> float:
    """Seconds for two requests sent at once (one per slot)."""

    def one(index: int) -> None:
        body = {
            "model": "local",
            "messages": [{"role": "user", "content": f"{index} Summarise: {SENTENCE * repeats}"}],
            "max_tokens": written, "temperature": 0, "cache_prompt": False, "ignore_eos": True,
        }  # fmt: skip
        httpx.post(url + "/chat/completions", json=body, timeout=600).raise_for_status()

    started = time.monotonic()
    sent = [threading.Thread(target=one, args=(index,)) for index in range(2)]
    for thread in sent:
        thread.start()
    for thread in sent:
        thread.join()
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 2, help="threads up to")
    args = parser.parse_args()
    binary, weights = model_paths(qwen=False)
    loads = [(0, 0), *((n, 0) for n in sorted({1, args.cores})), (args.cores, 10)]
    names = ["idle", *(f"{n} busy" + (f", nice {k}" if k else "") for n, k in loads[1:])]
    print("seconds per two requests at once, and the ratio to idle")
    print(f"{'threads':>7} {'shape':<10} " + " ".join(f"{name:>16}" for name in names))
    for threads in range(1, args.cores + 1):
        with (
            tempfile.TemporaryDirectory() as tmp,
            llama_server(binary, weights, 2048, Path(tmp), threads=threads) as url,
        ):
            for shape, (repeats, written) in SHAPES.items():
                pair(url, repeats, written)  # warm up
                figures: list[float] = []
                for processes, niceness in loads:
                    with busy(processes, niceness):
                        figures.append(pair(url, repeats, written))
                cells = [f"{figures[0]:>16.1f}"] + [
                    f"{f'{figure:.1f} ({figure / figures[0]:.1f}x)':>16}" for figure in figures[1:]
                ]
                print(f"{threads:>7} {shape:<10} " + " ".join(cells))


if __name__ == "__main__":
    main()
