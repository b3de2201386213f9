"""Exactly-once table recovery needs the changelog's real last stable offset.

faust-streaming 0.15.3 (`AIOKafkaConsumerThread._highwaters`) answers a transactional
consumer's highwaters from `last_stable_offset(tp)`, a value aiokafka only knows once it has
fetched from that partition in the current assignment. Right after a rebalance it is None, so
recovery takes the highwater to be -1: a worker with an empty RocksDB skips restoring the
approvals it just took over (pending approvals vanish; decisions for them are dead-lettered),
and a worker whose RocksDB is ahead of -1 crashes with `ConsistencyError` at every start. The
chaos run (docs/chaos.md) hit both after a broker restart.

`ListOffsets` with the consumer's read_committed isolation returns the last stable offset from
the broker itself, so the fix is to always ask it.

A stable offset can also stop short: a worker that died mid-transaction leaves it open until
the new owner's producer fences it and the coordinator writes the abort marker, a moment
*after* the new owner starts. Recovery stopping there misses what was written after the
transaction began outside it: the `running` mark of an approved call, so the redelivered
decision would run the call a second time (the CI-sized exactly-once chaos run caught one).
So recovery waits, bounded, until the stable offset reaches the high watermark.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer

_PATCHED = "_stream_adapter_highwaters"


STABLE_WAIT_S = 30.0


async def _broker_highwaters(self: Any, partitions: list[Any]) -> Mapping[Any, int]:
    consumer = self._ensure_consumer()
    stable: Mapping[Any, int] = await consumer.end_offsets(partitions)
    if not partitions:
        return stable
    probe = AIOKafkaConsumer(
        bootstrap_servers=consumer._client._bootstrap_servers,
        isolation_level="read_uncommitted",
    )
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


def use_broker_highwaters() -> None:
    """Make Faust's recovery ask the broker for (stable) end offsets; idempotent."""
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    if not getattr(AIOKafkaConsumerThread, _PATCHED, False):
        AIOKafkaConsumerThread._highwaters = _broker_highwaters  # type: ignore[method-assign]
        setattr(AIOKafkaConsumerThread, _PATCHED, True)
