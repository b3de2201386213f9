"""Exactly-once table recovery restores a changelog up to the broker's last stable offset.

Faust answers a transactional consumer's highwaters from what aiokafka has fetched, which is
nothing right after a rebalance: recovery would then skip the records a worker took over.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import TopicPartition
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

from stream_adapter.stream.engine import patches
from tests.harness import unique

RECORDS = 3


async def _changelog_with_records(bootstrap: str) -> TopicPartition:
    topic = unique("changelog")
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for n in range(RECORDS):
            await producer.send_and_wait(topic, b"%d" % n, key=b"k%d" % n)
    finally:
        await producer.stop()
    return TopicPartition(topic, 0)


def _consumer_thread(consumer: AIOKafkaConsumer) -> Any:
    """The parts of Faust's consumer thread `_highwaters` reads, for an exactly-once app."""
    return SimpleNamespace(
        consumer=SimpleNamespace(in_transaction=True), _ensure_consumer=lambda: consumer
    )


async def test_recovery_highwaters_come_from_the_broker_before_any_fetch(
    kafka_bootstrap: str,
) -> None:
    patches.install()
    tp = await _changelog_with_records(kafka_bootstrap)
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, isolation_level="read_committed")
    await consumer.start()
    try:
        consumer.assign([tp])  # as after a rebalance: assigned, nothing fetched yet
        thread = _consumer_thread(consumer)
        fausts = patches.original(AIOKafkaConsumerThread, "_highwaters")
        assert (await fausts(thread, [tp]))[tp] is None  # what recovery took for -1
        ours = await AIOKafkaConsumerThread._highwaters(thread, [tp])  # type: ignore[arg-type]
        assert ours == {tp: RECORDS}
    finally:
        await consumer.stop()
