"""Exactly-once table recovery reads the changelog up to its real last stable offset.

Recovery restores a table partition up to the changelog's highwater. For a transactional
consumer Faust answers it from what aiokafka last fetched, which is unknown right after a
rebalance; here the broker is asked (`ListOffsets`, read_committed), and recovery waits,
bounded, until the stable offset reaches the high watermark: a transaction a dead worker left
open is aborted a moment after the new owner starts, and recovery stopping short of it would
miss the records written after it began (an approved call's `running` mark). Installed by
engine/patches.py; the faults it fixes are in docs/faust-patches.md.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer

STABLE_WAIT_S = 30.0
"""Longest recovery waits for an open transaction on the changelog to close."""

Highwaters = Callable[[Any, list[Any]], Awaitable[Mapping[Any, int]]]


def broker_highwaters(highwaters: Highwaters) -> Highwaters:
    """`AIOKafkaConsumerThread._highwaters` asking the broker when the app is exactly once
    (Faust's own, `highwaters`, otherwise)."""

    async def _highwaters(self: Any, partitions: list[Any]) -> Mapping[Any, int]:
        if not self.consumer.in_transaction:
            return await highwaters(self, partitions)
        return await stable_highwaters(self._ensure_consumer(), partitions)

    return _highwaters


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
