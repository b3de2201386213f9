"""Small aiokafka helpers the operator tools share: clients that start or say why not,
partitions of a topic, reading a topic to its end."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError
from aiokafka.structs import TopicPartition

from stream_adapter.commands.exits import TopicMissing
from stream_adapter.errors import BrokerError
from stream_adapter.partitions import topic_partitions
from stream_adapter.settings import Settings

C = TypeVar("C", AIOKafkaConsumer, AIOKafkaProducer)


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


def producer(settings: Settings) -> AIOKafkaProducer:
    """A producer whose sends the broker has acked on every in-sync replica."""
    return AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers, acks="all")


@contextlib.asynccontextmanager
async def started(client: C, settings: Settings) -> AsyncIterator[C]:
    """client, started, and stopped on the way out; BrokerError when the broker cannot be
    reached (the client is closed then too, so nothing is left unclosed)."""
    try:
        await client.start()
    except KafkaError as exc:
        await client.stop()
        raise BrokerError(
            f"cannot reach the broker at {settings.bootstrap_servers} ({type(exc).__name__})"
        ) from None
    try:
        yield client
    finally:
        await client.stop()


async def reachable(settings: Settings) -> None:
    """BrokerError unless the broker answers a metadata request."""
    async with started(consumer(settings), settings) as client:
        # A request, not only the start: a consumer stopped before its first await raises
        # CancelledError from its coordinator's unstarted task.
        await client.topics()


async def partitions(client: AIOKafkaConsumer, topic: str) -> list[TopicPartition]:
    """Every partition of topic; TopicMissing when the topic does not exist."""
    found = await topic_partitions(client, topic)
    if not found:
        raise TopicMissing(f"topic {topic!r} does not exist (run `stream-adapter topics create`)")
    return [TopicPartition(topic, p) for p in found]


async def require_topic(settings: Settings, topic: str) -> None:
    """TopicMissing unless topic exists (a producer would wait 40 s for it, then fail)."""
    async with started(consumer(settings), settings) as client:
        await partitions(client, topic)


async def read_to_end(settings: Settings, topic: str) -> AsyncIterator[Any]:
    """Every message of topic from the beginning up to its end offsets when called."""
    async with started(consumer(settings), settings) as client:
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
