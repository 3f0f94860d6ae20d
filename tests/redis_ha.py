"""Redis deployments past one server, from Debian's redis-server, for the tests and benches.

    cluster(workdir)    a Redis Cluster: 3 primaries, 3 replicas (`redis-cli --cluster create`)
    sentinels(workdir)  a Sentinel set: 1 primary, 1 replica, 3 Sentinels (`redis-server
                        <conf> --sentinel`), quorum 2

Each waits until the deployment is whole (every slot served, every replica linked, every
Sentinel aware of the replica and of the other Sentinels) and stops every process at the end.
Failure detection is fast (`node_timeout_ms`, `down_after_ms`, one second by default) so that
a test's failover takes seconds. Session fixtures `redis_cluster` and `redis_sentinel` share
one of each between the tests that only need them working.
"""

from __future__ import annotations

import contextlib
import functools
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
import redis.cluster

from tests.ports import free_port
from tests.redis_server import port_of, redis_process, retried, wait_until_logged

DEADLINE_SECONDS = 60.0
"""The longest a deployment may take to form, or a failover to finish."""
SERVICE = "overspill"
"""The Sentinel set's service name."""

Process = subprocess.Popen[str]


def until(what: str, condition: Callable[[], bool], seconds: float = DEADLINE_SECONDS) -> float:
    """Poll real processes until `condition` holds; the seconds it took (fails past `seconds`)."""
    started = time.monotonic()
    while True:
        with contextlib.suppress(redis.RedisError, OSError):
            if condition():
                return time.monotonic() - started
        if time.monotonic() - started > seconds:
            pytest.fail(f"{what}: not done after {seconds:g} s")
        time.sleep(0.05)  # polling real processes, not a test sleep


def _client(port: int) -> redis.Redis:
    return redis.Redis(port=port, socket_timeout=2, socket_connect_timeout=2)


def _ask(port: int, *command: str) -> object:
    with _client(port) as client:
        return client.execute_command(*command)


@dataclass
class ClusterSet:
    """A running Redis Cluster: its nodes by port and its URL."""

    nodes: dict[int, Process]
    url: str = ""
    killed: set[int] = field(default_factory=set)

    def alive(self) -> list[int]:
        """Ports of the nodes still running."""
        return [port for port in self.nodes if port not in self.killed]

    def slots(self, port: int | None = None) -> dict[int, tuple[int, list[int]]]:
        """Each slot range's first slot → (last slot, [primary port, replica ports...]), as
        node `port` (else the first live node that answers) sees them."""
        for asked in [port] if port is not None else self.alive():
            with contextlib.suppress(redis.RedisError):
                found = _ask(asked, "CLUSTER", "SLOTS")
                assert isinstance(found, list)
                return {
                    int(row[0]): (int(row[1]), [int(node[1]) for node in row[2:]]) for row in found
                }
        raise AssertionError("no cluster node answers")

    def primary_of(self, key: str) -> int:
        """The port of the primary that serves `key`'s slot now."""
        slot = int(_ask(self.alive()[0], "CLUSTER", "KEYSLOT", key))  # type: ignore[call-overload]
        for first, (last, ports) in self.slots().items():
            if first <= slot <= last:
                return ports[0]
        raise AssertionError(f"slot {slot} is not served")

    def client(self) -> redis.cluster.RedisCluster:
        """A plain redis-py cluster client (the caller closes it), to look at keys."""
        return redis.cluster.RedisCluster(host="127.0.0.1", port=self.alive()[0])

    def process(self, port: int) -> Process:
        """The process of a node."""
        return self.nodes[port]

    def replicas_of(self, key: str) -> list[int]:
        """The ports of the live replicas of `key`'s primary."""
        primary = self.primary_of(key)
        for _, ports in self.slots().values():
            if ports[0] == primary:
                return [port for port in ports[1:] if port not in self.killed]
        return []

    def primaries(self) -> list[int]:
        """The ports of the primaries serving slots now."""
        return sorted({ports[0] for _, ports in self.slots().values()})

    def kill(self, port: int) -> None:
        """SIGKILL one node (it stays dead)."""
        self.nodes[port].kill()
        self.nodes[port].wait(timeout=10)
        self.killed.add(port)

    def healthy(self, *, replicated: bool = True) -> bool:
        """Whether every live node says the cluster is ok and sees every slot served by a live
        primary (`replicated`: and by a replica linked to it)."""
        for port in self.alive():
            if _info(port, "CLUSTER", "INFO").get("cluster_state") != "ok":
                return False
            replication = _info(port, "INFO", "replication")
            if replication.get("role") == "slave" and replication.get("master_link_status") != "up":
                return False
            served = self.slots(port)
            if sum(last - first + 1 for first, (last, _) in served.items()) != 16384:
                return False
            for _, ports in served.values():
                live = [p for p in ports if p not in self.killed]
                if ports[0] in self.killed or (replicated and len(live) < 2):
                    return False
        return True

    def wait_failover(self, killed: int) -> float:
        """Wait until another node serves every slot `killed` served; the seconds it took."""
        return until("cluster failover", lambda: self.healthy(replicated=False))


@contextlib.contextmanager
def cluster(workdir: Path, node_timeout_ms: int = 1000) -> Iterator[ClusterSet]:
    """A 3-primary, 3-replica Redis Cluster on loopback, formed and checked whole."""
    cli = shutil.which("redis-cli")
    if cli is None:
        pytest.fail("redis-cli is not on PATH: run scripts/ensure-redis.sh (`make test` does)")
    with contextlib.ExitStack() as stack:
        nodes: dict[int, Process] = {}
        for index in range(6):
            home = workdir / f"node{index}"
            home.mkdir()
            process, url = stack.enter_context(
                retried(functools.partial(_node, home, node_timeout_ms))
            )
            nodes[port_of(url)] = process
        addresses = [f"127.0.0.1:{port}" for port in nodes]
        created = subprocess.run(
            [cli, "--cluster", "create", *addresses, "--cluster-replicas", "1", "--cluster-yes"],
            capture_output=True, text=True, timeout=DEADLINE_SECONDS, check=False,
        )  # fmt: skip
        if created.returncode != 0:
            pytest.fail(f"redis-cli --cluster create failed:\n{created.stdout}{created.stderr}")
        found = ClusterSet(nodes, "redis+cluster://" + ",".join(addresses[:2]))
        until("cluster formed", found.healthy)
        yield found


def _node(
    home: Path, node_timeout_ms: int
) -> contextlib.AbstractContextManager[tuple[Process, str]]:
    """A cluster node on two ports chosen now (its clients' and its cluster bus), with no
    cluster configuration left by an attempt whose port was taken."""
    (home / "nodes.conf").unlink(missing_ok=True)
    options = [
        *("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"),
        *("--cluster-node-timeout", str(node_timeout_ms)),
        *("--cluster-port", str(free_port()), "--cluster-replica-validity-factor", "0"),
    ]
    return redis_process(home, *options, port=free_port())


@dataclass
class SentinelSet:
    """A running Sentinel set: the data nodes by port, the Sentinels, and its URL."""

    data: dict[int, Process]
    sentinels: dict[int, Process]
    url: str = ""
    killed: set[int] = field(default_factory=set)

    def primary(self) -> int:
        """The port of the primary the Sentinels name now."""
        for port in self.sentinels:
            with contextlib.suppress(redis.RedisError):
                found = _ask(port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
                assert isinstance(found, list)
                return int(found[1])
        raise AssertionError("no Sentinel answers")

    def client(self) -> redis.Redis:
        """A plain redis-py client of the primary the Sentinels name (the caller closes it)."""
        return redis.Redis(port=self.primary())

    def process(self, port: int) -> Process:
        """The process of a data node."""
        return self.data[port]

    def primary_of(self, key: str) -> int:
        """The port of the primary (every key's)."""
        return self.primary()

    def replicas_of(self, key: str) -> list[int]:
        """The ports of the live replicas (every key's)."""
        return self.replicas()

    def replicas(self) -> list[int]:
        """The ports of the live data nodes that are not the primary."""
        primary = self.primary()
        return [port for port in self.data if port != primary and port not in self.killed]

    def kill(self, port: int) -> None:
        """SIGKILL one data node (it stays dead)."""
        self.data[port].kill()
        self.data[port].wait(timeout=10)
        self.killed.add(port)

    def healthy(self) -> bool:
        """Whether every Sentinel names a live primary that a linked replica follows, and
        knows the other Sentinels."""
        primary = self.primary()
        if primary in self.killed:
            return False
        for port in self.sentinels:
            named = _ask(port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
            assert isinstance(named, list)
            others = _ask(port, "SENTINEL", "SENTINELS", SERVICE)
            assert isinstance(others, list)
            if int(named[1]) != primary or len(others) != len(self.sentinels) - 1:
                return False
        replicas = [port for port in self.data if port not in self.killed and port != primary]
        return all(
            _info(port, "INFO", "replication").get("master_link_status") == "up"
            and _info(port, "INFO", "replication").get("master_port") == str(primary)
            for port in replicas
        )

    def wait_failover(self, killed: int) -> float:
        """Wait until the Sentinels name another primary; the seconds it took."""
        return until("sentinel failover", lambda: self.primary() != killed)


Deployment = ClusterSet | SentinelSet
"""Either kind of deployment: both answer primary_of, replicas_of, process, kill, client."""


@contextlib.contextmanager
def sentinels(workdir: Path, down_after_ms: int = 1000) -> Iterator[SentinelSet]:
    """A primary, its replica and three Sentinels (quorum 2) on loopback, all linked."""
    with contextlib.ExitStack() as stack:
        (workdir / "primary").mkdir()
        first, url = stack.enter_context(redis_process(workdir / "primary"))
        primary = port_of(url)
        (workdir / "replica").mkdir()
        second, url = stack.enter_context(
            redis_process(workdir / "replica", "--replicaof", "127.0.0.1", str(primary))
        )
        replica = port_of(url)
        watching: dict[int, Process] = {}
        for index in range(3):
            home = workdir / f"sentinel{index}"
            home.mkdir()
            watched = retried(functools.partial(_sentinel_process, home, primary, down_after_ms))
            port, process = stack.enter_context(watched)
            watching[port] = process
        hosts = ",".join(f"127.0.0.1:{port}" for port in watching)
        found = SentinelSet({primary: first, replica: second}, watching)
        found.url = f"redis+sentinel://{hosts}/{SERVICE}"
        until("sentinel set formed", found.healthy)
        yield found


@contextlib.contextmanager
def _sentinel_process(
    home: Path, primary: int, down_after_ms: int
) -> Iterator[tuple[int, Process]]:
    """A Sentinel watching the primary on `primary`, on a port chosen now; its port and process."""
    server = shutil.which("redis-server")
    if server is None:
        pytest.fail("redis-server is not on PATH: run scripts/ensure-redis.sh (`make test` does)")
    port = free_port()
    (home / "sentinel.conf").write_text(
        f"port {port}\nbind 127.0.0.1\ndir {home}\n"
        f"sentinel monitor {SERVICE} 127.0.0.1 {primary} 2\n"
        f"sentinel down-after-milliseconds {SERVICE} {down_after_ms}\n"
        f"sentinel failover-timeout {SERVICE} {max(3 * down_after_ms, 3000)}\n"
    )
    command = [server, str(home / "sentinel.conf"), "--sentinel", "--logfile", ""]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=home)
    assert process.stdout is not None
    drain: threading.Thread | None = None
    try:
        drain = wait_until_logged(process, process.stdout, "+monitor master")
        yield port, process
    finally:
        if process.poll() is None:
            process.terminate()
        process.wait(timeout=10)
        if drain is not None:
            drain.join(timeout=10)
        process.stdout.close()


def _info(port: int, *command: str) -> dict[str, str]:
    """An INFO-style answer (`key:value` lines) as a dict."""
    raw = _ask(port, *command)
    if isinstance(raw, dict):
        return {str(k): str(v) for k, v in raw.items()}
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterSet]:
    """A Redis Cluster (3 primaries, 3 replicas) for the whole session; nothing kills it."""
    with cluster(tmp_path_factory.mktemp("cluster"), node_timeout_ms=5000) as found:
        yield found


@pytest.fixture(scope="session")
def redis_sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelSet]:
    """A Sentinel set (1 primary, 1 replica, 3 Sentinels) for the whole session."""
    with sentinels(tmp_path_factory.mktemp("sentinel"), down_after_ms=5000) as found:
        yield found


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[ClusterSet]:
    """A Redis Cluster of this test's own, to kill a primary of."""
    with cluster(tmp_path) as found:
        yield found


@pytest.fixture
def own_sentinel(tmp_path: Path) -> Iterator[SentinelSet]:
    """A Sentinel set of this test's own, to kill its primary."""
    with sentinels(tmp_path) as found:
        yield found
