"""Partition claims against the real broker: the newest claim of a partition fences every
earlier one, and what a fenced claim wrote never reaches a read_committed reader.

Two `PartitionClaims` play two workers of one app (each its own producers, as two processes
have); the group's assignment is handed to them as Faust's rebalance callback would.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.structs import TopicPartition
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as Partition

from stream_adapter.settings import Settings
from stream_adapter.stream.engine import OwnershipLost, PartitionClaims
from stream_adapter.stream.engine.claims import Write
from tests.harness import unique

pytestmark = pytest.mark.integration

TOPIC = "requests"
"""The claimed topic's name (only its partitions matter to a claim)."""


SESSION_TIMEOUT_S = 4.0
"""The app's session timeout here: a membership unconfirmed for half of it suspends claims
(these apps never heartbeat: only an assignment confirms them)."""


def _worker(settings: Settings, owned: set[TopicPartition]) -> Any:
    """What PartitionClaims uses of a Faust app: its id and session timeout, a producer
    factory, an assignment, and a rejoin request (counted in `rejoins`)."""

    def new_producer(transactional_id: str) -> AIOKafkaProducer:
        return AIOKafkaProducer(
            bootstrap_servers=settings.bootstrap_servers,
            transactional_id=transactional_id,
            enable_idempotence=True,
            acks="all",
        )

    rejoins: list[float] = []
    return SimpleNamespace(
        conf=SimpleNamespace(id=settings.app_id, broker_session_timeout=SESSION_TIMEOUT_S),
        producer=SimpleNamespace(_new_producer=new_producer),
        consumer=SimpleNamespace(
            assignment=lambda: owned,
            request_rejoin=lambda: rejoins.append(time.monotonic()),
            rejoins=rejoins,
        ),
    )


@pytest.fixture
async def claims(settings: Settings) -> AsyncIterator[Callable[[], PartitionClaims]]:
    made: list[PartitionClaims] = []

    def make() -> PartitionClaims:
        made.append(PartitionClaims(_worker(settings, {TopicPartition(TOPIC, 0)}), [TOPIC]))
        return made[-1]

    yield make
    for each in made:
        await each.stop()


def _committed_values(settings: Settings, partition: int) -> list[bytes]:
    """The values on the approvals topic's partition, read_committed, by librdkafka."""
    topic = settings.approvals_topic
    consumer = Consumer(
        {
            "bootstrap.servers": settings.bootstrap_servers,
            "group.id": unique("reader"),
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        end = consumer.get_watermark_offsets(Partition(topic, partition), timeout=10)[1]
        consumer.assign([Partition(topic, partition, 0)])
        values: list[bytes] = []
        for _ in range(200):
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
            [position] = consumer.position([Partition(topic, partition)])
            if position.offset >= end:
                return values
        raise AssertionError("the partition was not read to its end")
    finally:
        consumer.close()


def _write(settings: Settings, value: bytes) -> list[Write]:
    return [Write(settings.approvals_topic, b"k", value, 0)]


async def test_a_newer_claim_fences_the_older_one(
    settings: Settings, claims: Callable[[], PartitionClaims]
) -> None:
    zombie, owner = claims(), claims()
    assigned = [TopicPartition(TOPIC, 0)]
    await zombie.on_assigned(assigned, generation=1)
    old = await zombie.claim(0)
    await old.write(_write(settings, b"before"))
    await owner.on_assigned(assigned, generation=2)  # the zombie missed this generation
    with pytest.raises(OwnershipLost):
        await old.write(_write(settings, b"zombie"))
    with pytest.raises(OwnershipLost):  # and never claims the partition again by itself
        await zombie.claim(0)
    await (await owner.claim(0)).write(_write(settings, b"owner"))
    assert _committed_values(settings, 0) == [b"before", b"owner"]


async def test_a_claim_lasts_across_consecutive_generations_and_not_across_a_gap(
    settings: Settings, claims: Callable[[], PartitionClaims]
) -> None:
    worker = claims()
    assigned = [TopicPartition(TOPIC, 0)]
    await worker.on_assigned(assigned, generation=4)
    first = await worker.claim(0)
    await worker.on_assigned(assigned, generation=5)  # kept: a run started under it still writes
    assert await worker.claim(0) is first
    await first.write(_write(settings, b"kept"))
    await worker.on_assigned(assigned, generation=7)  # a gap: another worker may have owned it
    again = await worker.claim(0)
    assert again is not first
    with pytest.raises(OwnershipLost):
        await first.write(_write(settings, b"stale"))
    await again.write(_write(settings, b"fresh"))
    await worker.on_assigned([], generation=8)  # revoked
    with pytest.raises(OwnershipLost):
        await again.write(_write(settings, b"revoked"))
    assert _committed_values(settings, 0) == [b"kept", b"fresh"]


async def test_a_revoked_claim_writes_only_outcomes_until_assigned_again(
    settings: Settings, claims: Callable[[], PartitionClaims]
) -> None:
    worker = claims()
    assigned = [TopicPartition(TOPIC, 0)]
    await worker.on_assigned(assigned, generation=1)
    claim = await worker.claim(0)
    worker.on_revoked(assigned)  # an eager rebalance begins
    with pytest.raises(OwnershipLost, match="revoked"):
        await claim.write(_write(settings, b"new run"))
    with pytest.raises(OwnershipLost, match="revoked"):  # nor may a marked run's tool start
        claim.ensure_current()
    await claim.write(_write(settings, b"outcome"), finishing=True)
    await worker.on_assigned(assigned, generation=2)  # kept
    claim.ensure_current()
    await claim.write(_write(settings, b"after"))
    assert _committed_values(settings, 0) == [b"outcome", b"after"]


async def test_an_unconfirmed_membership_suspends_every_write_and_asks_to_rejoin(
    settings: Settings, claims: Callable[[], PartitionClaims]
) -> None:
    worker = claims()
    assigned = [TopicPartition(TOPIC, 0)]
    await worker.on_assigned(assigned, generation=1)
    claim = await worker.claim(0)
    await claim.write(_write(settings, b"before"))
    time.sleep(0.6 * SESSION_TIMEOUT_S)  # noqa: ASYNC251 - the loop stands still, as when paused
    with pytest.raises(OwnershipLost, match="membership unconfirmed"):
        claim.ensure_current()  # a tool marked running before the pause does not start
    with pytest.raises(OwnershipLost, match="membership unconfirmed"):
        await claim.write(_write(settings, b"outcome"), finishing=True)
    worker.on_revoked(assigned)  # the rebalance it asked for
    with pytest.raises(OwnershipLost, match="membership unconfirmed"):  # not even an outcome
        await claim.write(_write(settings, b"outcome"), finishing=True)
    assert len(worker._app.consumer.rejoins) == 1 and worker.suspensions_total == 1
    await worker.on_assigned(assigned, generation=2)  # still a member: kept
    await claim.write(_write(settings, b"after"))
    assert _committed_values(settings, 0) == [b"before", b"after"]


async def test_writes_that_come_together_commit_together_in_order(
    settings: Settings, claims: Callable[[], PartitionClaims]
) -> None:
    worker = claims()
    await worker.on_assigned([TopicPartition(TOPIC, 0)], generation=1)
    claim = await worker.claim(0)
    values = [b"v%d" % i for i in range(20)]
    written = await asyncio.gather(*(claim.write(_write(settings, v)) for v in values))
    assert [len(w) for w in written] == [1] * 20
    offsets = [w[0].offset for w in written]
    assert offsets == sorted(offsets)
    assert claim.transactions < 20  # batched, not one transaction each
    assert _committed_values(settings, 0) == values
