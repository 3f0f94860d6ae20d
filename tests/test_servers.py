"""The servers the tests start (redis-server, overspill serve) start on another port when the one
chosen was taken before they listened."""

from __future__ import annotations

import contextlib
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import redis_server
from tests.e2e import conftest
from tests.e2e.conftest import PortTaken, start_overspill, stop
from tests.ports import free_port
from tests.redis_server import port_of, redis_process, retried


@pytest.fixture
def taken() -> Iterator[int]:
    """A loopback port another socket listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


def test_a_port_taken_before_the_server_listens_is_chosen_again(
    tmp_path: Path, taken: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first port chosen is taken: the server starts on the next one chosen."""
    chosen = iter([taken, free_port()])
    monkeypatch.setattr(redis_server, "free_port", lambda: next(chosen))
    with redis_process(tmp_path) as (process, url):
        assert process.poll() is None
        assert port_of(url) != taken


def test_a_port_the_caller_gave_is_not_chosen_again(tmp_path: Path, taken: int) -> None:
    """A port given that is taken says so: the caller chooses the ports it knows of."""
    with pytest.raises(PortTaken), redis_process(tmp_path, port=taken):
        pass


def test_only_the_start_is_tried_again(tmp_path: Path) -> None:
    """What fails inside a started server's context is not a reason to start it again."""
    starts = []

    def start() -> contextlib.AbstractContextManager[tuple[subprocess.Popen[str], str]]:
        starts.append(1)
        return redis_process(tmp_path)

    with pytest.raises(PortTaken), retried(start):
        raise PortTaken("inside")
    assert len(starts) == 1


def test_overspill_serve_on_a_port_taken_meanwhile_starts_on_another(
    tmp_path: Path, taken: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """overspill serve exits on a taken port (its log says so): it is started on the next."""
    chosen = iter([taken, free_port()])
    monkeypatch.setattr(conftest, "free_port", lambda: next(chosen))
    config = "model_list:\n  - model_name: m\n    litellm_params: {model: openai/m}\n"
    process, url, _ = start_overspill(config, tmp_path)
    try:
        assert process.poll() is None
        assert not url.endswith(f":{taken}")
    finally:
        stop(process)
