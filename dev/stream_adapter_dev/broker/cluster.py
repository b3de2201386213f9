"""A local Apache Kafka (KRaft) cluster of three nodes on 127.0.0.1, from the same jars as the
single broker (local.py), for development, tests and chaos runs against real replication.

Each node is a combined broker and controller with its own ports and home under
`<home>/cluster/node<N>/` (laid out like a single broker's home: `data/`, `logs/`,
`broker.pid`). The nodes form a static controller quorum, are formatted once with one cluster
id, and keep every topic, the internal ones included, at replication 3 and min ISR 2.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError
from aiokafka.protocol.metadata import MetadataRequest

from stream_adapter.core.errors import BrokerError
from stream_adapter_dev.broker import local

NODES = 3
HEAP_MB = 384
"""Per node. Three nodes under load stay within about 1.5 GiB of resident memory (docs)."""
JVM_FLAGS = ("-XX:TieredStopAtLevel=1",)
"""C1 only: on two cores, C2 compiling three brokers' hot paths competes with the workers."""
REPLICATION = 3
MIN_INSYNC = 2
_POLL_S = 0.5
_ATTEMPTS = 10


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """Where and how the local cluster's nodes run; node ids are 1..len(ports)."""

    home: Path = local.DEFAULT_HOME
    ports: tuple[int, ...] = (9092, 9094, 9096)
    controller_ports: tuple[int, ...] = (9093, 9095, 9097)
    heap_mb: int = HEAP_MB
    jars_dir: Path | None = None
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_port(
        cls, home: Path, port: int, nodes: int = NODES, **changes: object
    ) -> ClusterConfig:
        """Nodes on port, port+2, …; each node's controller on the port above its broker's."""
        ports = tuple(port + 2 * i for i in range(nodes))
        return cls(home, ports, tuple(p + 1 for p in ports), **changes)  # type: ignore[arg-type]

    @classmethod
    def on_free_ports(cls, home: Path, nodes: int = NODES, **changes: object) -> ClusterConfig:
        """Nodes on free ports laid out as from_port does, so `--port` names the cluster."""
        for _ in range(100):
            port = local.free_port()
            if not any(local._port_taken(port + i) for i in range(1, 2 * nodes)):
                local._handed_out.update(range(port, port + 2 * nodes))  # never handed out again
                return cls.from_port(home, port, nodes, **changes)
        raise BrokerError(f"no {2 * nodes} free ports in a row on 127.0.0.1")

    @property
    def node_ids(self) -> list[int]:
        return list(range(1, len(self.ports) + 1))

    @property
    def bootstrap(self) -> str:
        """Every node's address, as aiokafka and the Kafka tools take it."""
        return ",".join(f"127.0.0.1:{port}" for port in self.ports)

    @property
    def broker_url(self) -> str:
        """The `STREAM_ADAPTER_BROKER` value that names every node."""
        return ";".join(f"kafka://127.0.0.1:{port}" for port in self.ports)

    @property
    def libs(self) -> Path:
        return (self.jars_dir or self.home / "libs") / local.KAFKA_VERSION

    def node(self, node_id: int) -> local.BrokerConfig:
        """Node node_id as a broker of local.py: its own ports, folder and properties."""
        i = node_id - 1
        return local.BrokerConfig(
            home=self.home / "cluster" / f"node{node_id}",
            port=self.ports[i],
            controller_port=self.controller_ports[i],
            heap_mb=self.heap_mb,
            jvm_flags=JVM_FLAGS,
            jars_dir=self.jars_dir or self.home / "libs",
            extra={**self._properties(node_id), **self.extra},
        )

    def _properties(self, node_id: int) -> dict[str, str]:
        replicas = str(min(REPLICATION, len(self.ports)))
        min_isr = str(min(MIN_INSYNC, len(self.ports)))
        return {
            "node.id": str(node_id),
            "controller.quorum.voters": ",".join(
                f"{n}@127.0.0.1:{port}"
                for n, port in zip(self.node_ids, self.controller_ports, strict=True)
            ),
            "controller.quorum.bootstrap.servers": ",".join(
                f"127.0.0.1:{port}" for port in self.controller_ports
            ),
            "default.replication.factor": replicas,
            "min.insync.replicas": min_isr,
            "offsets.topic.replication.factor": replicas,
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": min_isr,
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": min_isr,
            "unclean.leader.election.enable": "false",
        }


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    """What `kafka status --brokers 3` reports: each node, and the brokers the cluster knows."""

    nodes: list[tuple[int, local.BrokerStatus]]
    registered: list[int]

    @property
    def healthy(self) -> bool:
        """Every node runs and answers, and every node is a registered broker."""
        return all(s.answers for _, s in self.nodes) and len(self.registered) == len(self.nodes)


@dataclass(frozen=True, slots=True)
class PartitionState:
    """One partition's leader and replicas as the cluster's metadata has them."""

    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)


def _meta_path(node: local.BrokerConfig) -> Path:
    return node.data / "meta.properties"


def _cluster_id_of(config: ClusterConfig) -> str | None:
    """The cluster id a formatted node carries (all carry the same one)."""
    for node_id in config.node_ids:
        path = _meta_path(config.node(node_id))
        if path.exists():
            for line in path.read_text().splitlines():
                if line.startswith("cluster.id="):
                    return line.split("=", 1)[1].strip()
    return None


def format_nodes(config: ClusterConfig) -> str:
    """Format every node not yet formatted, all with one cluster id; returns that id."""
    java = local._java()
    classpath = f"{local.ensure_jars(config.node(1)).resolve()}/*"
    cluster_id = _cluster_id_of(config) or local._cluster_id()
    for node_id in config.node_ids:
        node = config.node(node_id)
        node.home.mkdir(parents=True, exist_ok=True)
        props = node.home / "server.properties"
        props.write_text(local._properties(node))
        if _meta_path(node).exists():
            continue
        node.data.mkdir(parents=True, exist_ok=True)
        # No --standalone: the quorum is the three voters named in the properties.
        cmd = [java, "-cp", classpath, "kafka.tools.StorageTool", "format"]
        cmd += ["-t", cluster_id, "-c", str(props)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = (done.stdout + done.stderr)[-3000:]
            raise BrokerError(f"formatting node {node_id} ({node.data}) failed:\n{tail}")
    return cluster_id


def start(config: ClusterConfig, *, timeout_s: float = 180.0) -> str:
    """Start every node (formatting on first start) and wait until all are registered brokers.

    Returns the bootstrap list. Idempotent: nodes already running from this home are reused.
    The nodes start together, since a controller quorum needs two of three to elect a leader.
    """
    format_nodes(config)
    with _quiet_aiokafka(), ThreadPoolExecutor(len(config.ports)) as pool:
        starts = [
            pool.submit(local.start, config.node(n), timeout_s=timeout_s) for n in config.node_ids
        ]
        errors = [f.exception() for f in starts]
    failed = [e for e in errors if e is not None]
    if failed:
        stop(config, kill=True)
        raise BrokerError(f"the cluster did not start: {failed[0]}") from failed[0]
    if not local.run_blocking(lambda: wait_registered(config, timeout_s=timeout_s)):
        stop(config, kill=True)
        raise BrokerError(f"not all {len(config.ports)} nodes registered within {timeout_s:.0f}s")
    return config.bootstrap


def start_node(config: ClusterConfig, node_id: int, *, timeout_s: float = 120.0) -> None:
    """Start one node of a formatted cluster (after a kill or stop); returns once it answers."""
    local.start(config.node(node_id), timeout_s=timeout_s)


def stop_node(config: ClusterConfig, node_id: int, *, kill: bool = False) -> bool:
    """SIGTERM (a controlled shutdown: leadership moves first) or SIGKILL one node."""
    return local.stop(config.node(node_id), kill=kill)


def stop(config: ClusterConfig, *, kill: bool = False) -> bool:
    """Stop every node (together: a lone last controller would wait for a quorum to leave).

    Data stays for the next start. False when no node was running.
    """
    with ThreadPoolExecutor(len(config.ports)) as pool:
        stopped = list(pool.map(lambda n: stop_node(config, n, kill=kill), config.node_ids))
    return any(stopped)


def status(config: ClusterConfig) -> ClusterStatus:
    """Each node's process and answer, and the brokers the cluster has registered."""
    nodes = [(n, local.status(config.node(n))) for n in config.node_ids]
    registered: list[int] = []
    live = [s.bootstrap for _, s in nodes if s.answers]
    if live:
        registered = local.run_blocking(lambda: _registered(",".join(live)))
    return ClusterStatus(nodes, sorted(registered))


@contextlib.asynccontextmanager
async def admin_client(bootstrap: str) -> AsyncIterator[AIOKafkaAdminClient]:
    """An aiokafka admin client for bootstrap, closed afterwards."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await admin.start()
    try:
        yield admin
    finally:
        await admin.close()


@contextlib.contextmanager
def _quiet_aiokafka() -> Iterator[None]:
    """A node that is down or still starting refuses connections: expected, not logged."""
    quiet = logging.getLogger("aiokafka")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        quiet.setLevel(level)


async def _registered(bootstrap: str) -> list[int]:
    with _quiet_aiokafka():
        try:
            async with admin_client(bootstrap) as admin:
                cluster = await admin.describe_cluster()
        except Exception:
            return []
    return [int(b["node_id"]) for b in cluster["brokers"]]


async def _registered_everywhere(bootstrap: str) -> list[list[int]]:
    """Each broker's own view of the registered brokers: each node answers metadata from its
    own copy, which can lag the others' for a moment after a start."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    with _quiet_aiokafka():
        try:
            await client.bootstrap()
            views = []
            for node in client.cluster.brokers():
                response = await client.send(node.nodeId, MetadataRequest([]))
                views.append([int(b["node_id"]) for b in response.to_object()["brokers"]])
        except Exception:
            return []
        finally:
            await client.close()
    return views


async def wait_registered(config: ClusterConfig, *, timeout_s: float) -> bool:
    """Wait until every node's metadata lists every node as a broker, so no client, whichever
    node it asks, sees the cluster short of one."""
    deadline = time.monotonic() + timeout_s
    whole = sorted(config.node_ids)
    while time.monotonic() < deadline:
        views = await _registered_everywhere(config.bootstrap)
        if len(views) == len(whole) and all(sorted(v) == whole for v in views):
            return True
        await asyncio.sleep(_POLL_S)
    return False


async def partition_states(
    bootstrap: str, topics: Iterable[str] | None = None
) -> list[PartitionState]:
    """Leader, replicas and ISR of every partition of topics (default: all, internal included)."""
    wanted = list(topics) if topics is not None else None
    async with admin_client(bootstrap) as admin:
        for attempt in range(_ATTEMPTS):
            try:  # the admin client asks a random known node, which may be the one down
                described = await admin.describe_topics(wanted)
                break
            except KafkaError:
                if attempt == _ATTEMPTS - 1:
                    raise
                await asyncio.sleep(_POLL_S)
    out = []
    for topic in described:
        for p in topic["partitions"]:
            out.append(
                PartitionState(
                    topic["topic"],
                    int(p["partition"]),
                    int(p["leader"]),
                    tuple(p["replicas"]),
                    tuple(p["isr"]),
                )
            )
    return sorted(out, key=lambda s: (s.topic, s.partition))


async def wait_in_sync(bootstrap: str, node_id: int, *, timeout_s: float) -> bool:
    """Wait until node_id is back in the ISR of every partition it is a replica of."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):  # a metadata request may meet a moving leader
            states = await partition_states(bootstrap)
            if states and all(node_id in s.isr for s in states if node_id in s.replicas):
                return True
        await asyncio.sleep(_POLL_S)
    return False
