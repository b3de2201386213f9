"""Small aiokafka helpers the operator commands and the client share: clients that start or say
why not, partitions of a topic, reading a topic to its end. The clients come from `clients`."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError
from aiokafka.structs import TopicPartition

from stream_adapter.core.errors import NotAuthorized, TopicMissing
from stream_adapter.kafka import clients as kafka_clients
from stream_adapter.kafka.partitions import topic_partitions
from stream_adapter.settings import Settings

C = TypeVar("C", AIOKafkaConsumer, AIOKafkaProducer)


def consumer(settings: Settings) -> AIOKafkaConsumer:
    """A group-less consumer; read_committed when the worker writes transactionally."""
    isolation = (
        "read_committed" if settings.processing_guarantee == "exactly_once" else "read_uncommitted"
    )
    return kafka_clients.consumer(settings, isolation_level=isolation)


def producer(settings: Settings) -> AIOKafkaProducer:
    """A producer whose sends the broker has acked on every in-sync replica."""
    return kafka_clients.producer(settings)


@contextlib.asynccontextmanager
async def started(client: C, settings: Settings) -> AsyncIterator[C]:
    """client, started, and stopped on the way out; a failure to connect is one clear error
    (kafka_clients: AuthenticationFailed, TlsFailed, BrokerError), the client closed then too;
    an authorization refusal meanwhile is NotAuthorized."""
    async with kafka_clients.started(settings, client):
        try:
            yield client
        except KafkaError as exc:
            raise kafka_clients.kafka_error(exc, "use the cluster") from None


async def reachable(settings: Settings) -> None:
    """Raise unless every codec works and the cluster answers a metadata request as these
    settings connect (kafka_clients.check_connection)."""
    await kafka_clients.check_connection(settings)


async def partitions(client: AIOKafkaConsumer, topic: str) -> list[TopicPartition]:
    """Every partition of topic; TopicMissing when the topic does not exist, NotAuthorized
    when the principal may not see it."""
    found = await topic_partitions(client, topic)
    if not found and topic in (await client._client.fetch_all_metadata()).unauthorized_topics:
        raise NotAuthorized(f"the cluster's ACLs refuse a topic: cannot describe {topic}")
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
