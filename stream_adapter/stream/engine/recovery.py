"""Table recovery: exactly once, up to the changelog's real last stable offset; and never
from a local store that belongs to another copy of the changelog.

Recovery restores a table partition up to the changelog's highwater. For a transactional
consumer Faust answers it from what aiokafka last fetched, which is unknown right after a
rebalance; here the broker is asked (`ListOffsets`, read_committed), and recovery waits,
bounded, until the stable offset reaches the high watermark: a transaction a dead worker left
open is aborted a moment after the new owner starts, and recovery stopping short of it would
miss the records written after it began (an approved call's `running` mark). Installed by
engine/patches.py; the faults it fixes are in docs/faust-patches.md.

A table partition's RocksDB store records the changelog offset it has applied. A store whose
offset lies past the end of the changelog was written from another copy of it (the topic was
deleted and created again, or the broker's data was wiped): Faust stops the worker with a
ConsistencyError, on every start, and when the new copy is empty it would not even notice and
serve the old records. Such a partition store is moved aside (renamed, never deleted) and
rebuilt from the changelog, with one WARNING line that says so.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer

from stream_adapter.core import logs

STABLE_WAIT_S = 30.0
"""Longest recovery waits for an open transaction on the changelog to close."""

Highwaters = Callable[[Any, list[Any]], Awaitable[Mapping[Any, int]]]


_STANDBY: ContextVar[bool] = ContextVar("stream_adapter_standby_highwaters", default=False)
"""True while recovery asks for its standby partitions' highwaters."""


def broker_highwaters(highwaters: Highwaters) -> Highwaters:
    """`AIOKafkaConsumerThread._highwaters` asking the broker when the app is exactly once
    (Faust's own, `highwaters`, otherwise); standby partitions get their last stable
    offsets at once, without waiting for open transactions."""

    async def _highwaters(self: Any, partitions: list[Any]) -> Mapping[Any, int]:
        if not self.consumer.in_transaction:
            return await highwaters(self, partitions)
        if _STANDBY.get():
            return await self._ensure_consumer().end_offsets(partitions)  # type: ignore[no-any-return]
        return await stable_highwaters(self._ensure_consumer(), partitions)

    return _highwaters


BuildHighwaters = Callable[[Any, Any, Any, Any, str], Awaitable[None]]


def standbys_without_waiting(build_highwaters: BuildHighwaters) -> BuildHighwaters:
    """`Recovery._build_highwaters` that, for standby partitions, takes the last stable
    offsets as they are.

    Faust builds them after active recovery and before the worker resumes its streams; a
    standby copy of a partition another worker writes in transactions almost always has one
    open, so waiting for it to close (`stable_highwaters`) held every rebalance up to
    STABLE_WAIT_S. A standby's highwater only tells when it has caught up.
    """

    async def _build_highwaters(
        self: Any, consumer: Any, tps: Any, destination: Any, title: str
    ) -> None:
        token = _STANDBY.set(title == "standby")
        try:
            await build_highwaters(self, consumer, tps, destination, title)
        finally:
            _STANDBY.reset(token)

    return _build_highwaters


_CONNECTION = (
    "security_protocol",
    "ssl_context",
    "sasl_mechanism",
    "sasl_plain_username",
    "sasl_plain_password",
    "sasl_kerberos_service_name",
    "sasl_kerberos_domain_name",
    "sasl_oauth_token_provider",
)


def connected_like(client: Any) -> dict[str, Any]:
    """aiokafka options that connect a new client as `client` (an `AIOKafkaClient`) is
    connected: the same servers, security protocol, TLS context and SASL credentials."""
    options = {name: getattr(client, f"_{name}") for name in _CONNECTION}
    return {"bootstrap_servers": client._bootstrap_servers, **options}


async def stable_highwaters(consumer: Any, partitions: list[Any]) -> Mapping[Any, int]:
    """The partitions' last stable offsets from the broker, once they reach the high
    watermarks (or after STABLE_WAIT_S)."""
    stable: Mapping[Any, int] = await consumer.end_offsets(partitions)
    if not partitions:
        return stable
    probe = AIOKafkaConsumer(**connected_like(consumer._client), isolation_level="read_uncommitted")
    await probe.start()
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STABLE_WAIT_S
        while True:
            high = await probe.end_offsets(partitions)
            if all(stable[tp] >= high[tp] for tp in partitions) or loop.time() > deadline:
                return stable
            await asyncio.sleep(0.2)
            stable = await consumer.end_offsets(partitions)
    finally:
        await probe.stop()


BuildOffsets = Callable[[Any, Any, Any, Any, str], Awaitable[None]]


def foreign_stores_set_aside(build_offsets: BuildOffsets) -> BuildOffsets:
    """`Recovery._build_offsets` that, after Faust's own, moves aside each partition store
    whose applied offset lies past the changelog's end, and recovers it from the start."""

    async def _build_offsets(
        self: Any, consumer: Any, tps: Any, destination: Any, title: str
    ) -> None:
        await build_offsets(self, consumer, tps, destination, title)
        if not tps:
            return
        highwaters = await consumer.highwaters(*tps)
        stale = [
            tp
            for tp in tps
            if highwaters.get(tp) is not None
            and destination.get(tp) is not None
            and destination[tp] > highwaters[tp] - 1
        ]
        if not stale:
            return
        earliest = await consumer.earliest_offsets(*stale)
        for tp in stale:
            aside = set_aside(self.tp_to_table.get(tp), tp.partition)
            logs.event(
                logs.WARNING,
                "table store of another copy of the changelog set aside; rebuilding it",
                topic=tp.topic,
                partition=tp.partition,
                offset=destination[tp],
                path=str(aside) if aside is not None else None,
            )
            first = earliest.get(tp)
            destination[tp] = first - 1 if first is not None else -1

    return _build_offsets


def set_aside(table: Any, partition: int) -> Path | None:
    """Close a table partition's RocksDB store and rename its folder (`.stale-<time>`); the
    next use opens a new, empty one. None when the store keeps nothing on disk."""
    store = getattr(table, "data", None)
    partition_path = getattr(store, "partition_path", None)
    if store is None or partition_path is None:
        return None
    db = store._dbs.pop(partition, None)
    if db is not None:
        db.close()
    index = store._key_index
    for key in [k for k, p in list(index.items()) if p == partition]:
        index.pop(key, None)
    path = Path(partition_path(partition))
    if not path.exists():
        return None
    aside = path.with_name(f"{path.name}.stale-{time.strftime('%Y%m%dT%H%M%S')}")
    path.rename(aside)
    return aside
