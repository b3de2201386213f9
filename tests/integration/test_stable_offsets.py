"""A partition's offsets pending in a transaction are not read as the ones before it.

Exactly once, a new owner that read the old offset while the previous owner's last commit was
being completed would start there and answer that transaction's calls again, committed twice.
Against the real broker: aiokafka's own OffsetFetch (v3) answers an open transaction's offset
commit with the offset from before it; the engine's (v7, require_stable) refuses to answer
until the transaction ends, then gives the committed offset.
"""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.structs import TopicPartition

from stream_adapter.stream.engine import patches
from stream_adapter.stream.engine.stable_offsets import UnstableOffsetCommit
from tests.harness import unique

OFFSET = 5


async def test_an_offset_commit_pending_in_a_transaction_is_waited_for(
    kafka_bootstrap: str,
) -> None:
    patches.install()
    tp = TopicPartition(unique("stable-offsets"), 0)
    group = unique("stable-offsets-group")
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(tp.topic, 1, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, transactional_id=unique("stable-offsets-txn")
    )
    consumer = AIOKafkaConsumer(
        bootstrap_servers=kafka_bootstrap,
        group_id=group,
        enable_auto_commit=False,
        isolation_level="read_committed",
    )
    await producer.start()
    await consumer.start()
    try:
        coordinator = consumer._coordinator
        await coordinator.ensure_coordinator_known()
        await producer.begin_transaction()
        await producer.send_offsets_to_transaction({tp: OFFSET}, group)
        # The transaction is open: its offset commit is pending.
        aiokafkas = patches.original(GroupCoordinator, "_do_fetch_commit_offsets")
        assert await aiokafkas(coordinator, [tp]) == {}  # as if nothing were committed
        with pytest.raises(UnstableOffsetCommit):
            await coordinator._do_fetch_commit_offsets([tp])
        waiting = asyncio.ensure_future(consumer.committed(tp))  # retries while pending
        await producer.commit_transaction()
        assert await asyncio.wait_for(waiting, 30) == OFFSET
    finally:
        await consumer.stop()
        await producer.stop()
