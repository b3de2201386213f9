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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_PATCHED = "_stream_adapter_highwaters"


async def _broker_highwaters(self: Any, partitions: list[Any]) -> Mapping[Any, int]:
    consumer = self._ensure_consumer()
    result: Mapping[Any, int] = await consumer.end_offsets(partitions)
    return result


def use_broker_highwaters() -> None:
    """Make Faust's recovery ask the broker for (stable) end offsets; idempotent."""
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    if not getattr(AIOKafkaConsumerThread, _PATCHED, False):
        AIOKafkaConsumerThread._highwaters = _broker_highwaters  # type: ignore[method-assign]
        setattr(AIOKafkaConsumerThread, _PATCHED, True)
