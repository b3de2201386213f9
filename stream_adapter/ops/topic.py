"""Small aiokafka helpers the operator tools share: partitions of a topic, reading to its end."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition

from stream_adapter.errors import BrokerError
from stream_adapter.partitions import topic_partitions
from stream_adapter.settings import Settings


def consumer(settings: Settings) -> AIOKafkaConsumer:
    """A group-less consumer; read_committed when the worker writes transactionally."""
    isolation = (
        "read_committed" if settings.processing_guarantee == "exactly_once" else "read_uncommitted"
    )
    return AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap_servers,
        enable_auto_commit=False,
        isolation_level=isolation,
    )


async def partitions(client: AIOKafkaConsumer, topic: str) -> list[TopicPartition]:
    """Every partition of topic; BrokerError when the topic does not exist."""
    found = await topic_partitions(client, topic)
    if not found:
        raise BrokerError(f"topic {topic!r} does not exist (run `stream-adapter topics create`)")
    return [TopicPartition(topic, p) for p in found]


async def read_to_end(settings: Settings, topic: str) -> AsyncIterator[Any]:
    """Every message of topic from the beginning up to its end offsets when called."""
    client = consumer(settings)
    await client.start()
    try:
        tps = await partitions(client, topic)
        client.assign(tps)
        await client.seek_to_beginning(*tps)
        ends = await client.end_offsets(tps)
        left = {tp for tp in tps if await client.position(tp) < ends[tp]}
        while left:
            batches = await client.getmany(*left, timeout_ms=500)
            for tp, messages in batches.items():
                for message in messages:
                    if message.offset < ends[tp]:
                        yield message
            left = {tp for tp in left if await client.position(tp) < ends[tp]}
    finally:
        await client.stop()
