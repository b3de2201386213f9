"""Partitions of a topic, and the one Kafka's default partitioner picks for a key.

The one place the worker, the operator commands and the chaos tools ask an aiokafka client
how many partitions a topic has. The partitioner is murmur2 of the key, as the Java client
computes it, from the `murmurhash2` C wheel (aiokafka's reads the key a byte at a time, once
per reply; tests/unit/test_partitioner.py checks both against Kafka's own vectors).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from murmurhash2 import murmurhash2 as _murmurhash2

_SEED = 0x9747B28C
_hash: Callable[[bytes, int], int] = _murmurhash2


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (seed 0x9747b28c) of data, an unsigned 32-bit int."""
    return _hash(data, _SEED)


def partition_for(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for key among `partitions` (0..n-1)."""
    return (_hash(key, _SEED) & 0x7FFFFFFF) % partitions


def known_partitions(client: Any, topic: str) -> int:
    """How many partitions an aiokafka client's metadata gives topic; 0 while it has none."""
    partitions = client.cluster.partitions_for_topic(topic)
    return len(partitions) if partitions else 0


async def partition_count(client: Any, topic: str) -> int:
    """topic's partition count, waiting for the client (`AIOKafkaClient`) to fetch its
    metadata first if it has none yet."""
    await client._wait_on_metadata(topic)
    return known_partitions(client, topic)


async def topic_partitions(consumer: Any, topic: str) -> list[int]:
    """The partition numbers of topic, sorted, as an `AIOKafkaConsumer` learns them (fetching
    the cluster's metadata when it knows none); empty when the broker has no such topic."""
    found = consumer.partitions_for_topic(topic)
    if not found:
        cluster = await consumer._client.fetch_all_metadata()
        found = cluster.partitions_for_topic(topic)
    return sorted(found or ())
