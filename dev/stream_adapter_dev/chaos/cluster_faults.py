"""The three-node cluster a chaos run controls, and its faults: which node to hit, and how.

The targets are chosen from the cluster's own metadata at the moment of the fault: the node
leading most partitions of the calls and replies topics, or the node coordinating most of the
worker group's transactions (the leader of the `__transaction_state` partitions their ids
live in, read from that topic itself).
"""

from __future__ import annotations

import asyncio
import struct
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from stream_adapter.core.errors import BrokerError
from stream_adapter.settings import Settings
from stream_adapter_dev.broker import cluster

from .observe import read_topic

TRANSACTION_STATE = "__transaction_state"
IN_SYNC_TIMEOUT_S = 180.0


@dataclass
class ClusterControl:
    """A local cluster on free ports that the run may kill and restart node by node."""

    config: cluster.ClusterConfig

    @classmethod
    async def start_local(
        cls, home: Path, jars_dir: Path | None, nodes: int = cluster.NODES
    ) -> ClusterControl:
        config = cluster.ClusterConfig.on_free_ports(home, nodes, jars_dir=jars_dir)
        await asyncio.to_thread(cluster.start, config)
        return cls(config)

    @property
    def bootstrap(self) -> str:
        return self.config.bootstrap

    @property
    def restartable(self) -> bool:
        return True

    @property
    def nodes(self) -> int:
        return len(self.config.ports)

    async def kill_node(self, node_id: int) -> None:
        """SIGKILL one node: no controlled shutdown, its leaderships move once it is fenced."""
        await asyncio.to_thread(cluster.stop_node, self.config, node_id, kill=True)

    async def terminate_node(self, node_id: int) -> None:
        """SIGTERM one node and wait for its exit (a controlled shutdown moves leaders first)."""
        await asyncio.to_thread(cluster.stop_node, self.config, node_id)

    async def restart_node(self, node_id: int) -> None:
        """Start the node again and wait until it is back in the ISR of all its partitions."""
        await asyncio.to_thread(cluster.start_node, self.config, node_id)
        if not await cluster.wait_in_sync(self.bootstrap, node_id, timeout_s=IN_SYNC_TIMEOUT_S):
            raise BrokerError(f"node {node_id} not back in sync within {IN_SYNC_TIMEOUT_S:.0f}s")

    async def busiest_leader(self, topics: list[str]) -> tuple[int, int]:
        """The node leading most partitions of topics, and how many it leads."""
        states = await cluster.partition_states(self.bootstrap, topics)
        counts = Counter(s.leader for s in states if s.leader >= 0)
        if not counts:
            raise BrokerError(f"no partition of {topics} has a leader")
        return counts.most_common(1)[0]

    async def transaction_coordinator(self, settings: Settings, id_prefix: str) -> tuple[int, int]:
        """The node coordinating most transactional ids starting with id_prefix, and how many
        (read with settings' client options)."""
        records = await read_topic(settings, TRANSACTION_STATE, timeout_s=30.0)
        partitions = {
            message.partition
            for message in records
            if (tid := transactional_id_of(message.key)) and tid.startswith(id_prefix)
        }
        if not partitions:
            raise BrokerError(f"no transactional id starting with {id_prefix!r} is registered")
        states = await cluster.partition_states(self.bootstrap, [TRANSACTION_STATE])
        leaders = {s.partition: s.leader for s in states}
        counts = Counter(leaders[p] for p in partitions)
        return counts.most_common(1)[0]

    async def stop(self) -> None:
        await asyncio.to_thread(cluster.stop, self.config)


def transactional_id_of(key: bytes | None) -> str | None:
    """The transactional id of a `__transaction_state` record key (int16 version, string)."""
    if key is None or len(key) < 4:
        return None
    (length,) = struct.unpack_from(">h", key, 2)
    if length < 0 or len(key) < 4 + length:
        return None
    return key[4 : 4 + length].decode(errors="replace")
