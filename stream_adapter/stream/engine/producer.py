"""The producer side: sends that wait for the broker's ack, in or outside a transaction.

Every send here waits for the broker's acknowledgement, so a job that acks its message
afterwards never lets a commit pass an unwritten output (contract §8). Exactly once, an output
joins the transaction of the message being processed (`current_delivery`), whatever
partition it goes to: Faust's own routing picks a transaction from the destination's
partition as its *consumer* sees it, and finds none for topics it does not consume
(docs/faust-patches.md), so the transactional id is named here. `BatchSender` hands record
batches built in memory to the producer whole (the calls route's inline lane); exactly once,
to the transactional producer of the input partition the batch's records answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable, Mapping
from typing import Any

from aiokafka.errors import IllegalOperation
from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.structs import TopicPartition
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

from stream_adapter.core.envelope import MAX_RECORD_BYTES
from stream_adapter.core.errors import RecordTooLarge
from stream_adapter.kafka import clients as kafka_clients
from stream_adapter.kafka.partitions import known_partitions, partition_count, partition_for
from stream_adapter.stream.engine.commits.gate import current_section
from stream_adapter.stream.engine.commits.transactions import TransactionFailed, transactional_id
from stream_adapter.stream.engine.records import Headers, current_delivery
from stream_adapter.stream.engine.topic_ids import topic_ids


class IdempotentProducer(faust_aiokafka.Producer):
    """Faust's producer, idempotent and acknowledged by all in-sync replicas at either
    guarantee: a send retried after a lost acknowledgement is written once, in order.

    Faust makes only its transactional producers idempotent.
    """

    def _settings_extra(self) -> Mapping[str, Any]:
        return {**super()._settings_extra(), "acks": "all", "enable_idempotence": True}


def record_size(key: bytes | None, value: bytes | None, headers: Headers | None = None) -> int:
    """The bytes of a record's key, value and headers (its batch framing aside)."""
    size = (0 if key is None else len(key)) + (0 if value is None else len(value))
    for name, data in headers or ():
        size += len(name) + len(data)
    return size


def check_size(
    topic: str, key: bytes | None, value: bytes | None, headers: Headers | None = None
) -> None:
    """Raise RecordTooLarge for a record above MAX_RECORD_BYTES, before it is sent: the broker
    would refuse it, and exactly once that refusal would fail the whole transaction."""
    size = record_size(key, value, headers)
    if size > MAX_RECORD_BYTES:
        raise RecordTooLarge(f"a record of {size} bytes for {topic} exceeds {MAX_RECORD_BYTES}")


async def acked(pending: Awaitable[Any], topic: str) -> Any:
    """The broker's ack of a send; its refusal of a record too large as RecordTooLarge (a
    topic whose max.message.bytes is below TOPIC_MAX_MESSAGE_BYTES), never a retryable
    failure."""
    try:
        return await pending
    except kafka_clients.SIZE_ERRORS as exc:
        raise kafka_clients.kafka_error(exc, f"write {topic}") from None


class Sender:
    """Sends records of the app and waits for each ack; `send` picks the guarantee's way.

    Every record is size-checked first (`check_size`): RecordTooLarge, nothing sent.
    """

    def __init__(self, app: Any) -> None:
        self._app = app
        self.exactly_once: bool = app.commit_gate is not None

    async def send(
        self, topic: str, key: bytes | None, value: bytes, headers: Headers | None = None
    ) -> None:
        """Exactly once, inside the current message's transaction; else a plain send."""
        if self.exactly_once:
            await self.in_transaction(topic, key, value, headers)
        else:
            await self.plain(topic, key, value, headers)

    async def topic_scope(self, topic: str) -> str:
        """What makes topic's delivery ids unique: its Kafka topic id (one per incarnation);
        empty from a broker too old to name topic ids. LookupError while the topic is not
        there (deleted, or not yet created)."""
        _, ids = await topic_ids(self._app.producer._ensure_producer().client)
        if ids is None:
            return ""
        if topic not in ids:
            raise LookupError(f"topic {topic} not found")
        return ids[topic]

    def transaction_of_current(self) -> str:
        """The transactional id of the message being processed."""
        source = current_delivery.get()
        return transactional_id(self._app, source.topic, source.partition)

    async def in_transaction(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None = None,
        partition: int | None = None,
    ) -> None:
        """Send inside the transaction of the message being processed (any partition)."""
        check_size(topic, key, value, headers)
        source = current_delivery.get(None)
        if source is None:
            raise RuntimeError("a transactional send needs the message being processed")
        section = current_section.get()
        if section is not None:
            await section.open()  # no commit between here and this message's ack
        tid = transactional_id(self._app, source.topic, source.partition)
        guard = self._app.transaction_guard
        if guard is not None and guard.failed(tid):
            raise TransactionFailed(tid)  # it will be aborted: redo the message after the rebalance
        producer = self._app.producer
        try:
            pending = await producer.send(
                topic, key, value, partition, None, headers, transactional_id=tid
            )
        except IllegalOperation:
            # Faust logs and swallows a failed begin_transaction (after a rebalance or a broker
            # restart), leaving the partition's producer outside any transaction: every send
            # fails until a restart. Begin it (a fatal producer is replaced first), if the
            # partition is still ours, and try again once; a stale job must not start a
            # producer that fences the new owner's.
            if TP(source.topic, source.partition) not in self._app.consumer.assignment():
                raise
            await producer.begin_transaction(tid)
            pending = await producer.send(
                topic, key, value, partition, None, headers, transactional_id=tid
            )
        await acked(pending, topic)

    async def outside_transaction(
        self, topic: str, key: bytes, value: bytes | None, partition: int | None
    ) -> None:
        """Send with the app's plain producer: durable at once, whatever a transaction does."""
        check_size(topic, key, value)
        producer = self._app.producer
        await producer.maybe_start()
        pending = await producer.send(topic, key, value, partition, None, None)
        await acked(pending, topic)

    async def plain(
        self, topic: str, key: bytes | None, value: bytes, headers: Headers | None
    ) -> None:
        """At-least-once send straight to the aiokafka producer under Faust's (no Faust Topic
        or produce-signal bookkeeping: about a third of the cost of a reply)."""
        check_size(topic, key, value, headers)
        producer = self._app.producer._ensure_producer()
        partition = None
        if key is not None:
            # aiokafka's own murmur2 reads a byte at a time; ours picks the same partition.
            count = known_partitions(producer.client, topic)
            if count:
                partition = partition_for(key, count)
        pending = await producer.send(topic, value, key=key, partition=partition, headers=headers)
        await acked(pending, topic)


Source = tuple[str, int]
"""An input partition, (topic, partition): exactly once, its transaction carries the outputs
of its records."""


class RecordBatch:
    """Records for one partition, built in memory and sent whole (`transactional`: inside a
    transaction)."""

    __slots__ = ("_append", "_builder")

    def __init__(
        self, size_bytes: int, compression: int = 0, *, transactional: bool = False
    ) -> None:
        """compression: the codec attribute of a batch (`BatchSender.batch` passes the
        producer's, so these batches are compressed like its others)."""
        self._builder = BatchBuilder(
            size_bytes,
            compression,
            is_transactional=transactional,
            key_serializer=None,
            value_serializer=None,
        )
        # The record builder's own append, called with positional arguments: aiokafka's
        # wrapper passes keywords, which its C extension parses at several times the cost.
        self._append = self._builder._builder.append

    def append(self, key: bytes | None, value: bytes, headers: Headers) -> bool:
        """Add a record; False when the batch is full (the record was not added)."""
        builder = self._builder
        if builder._closed:
            return False
        if self._append(builder._relative_offset, None, key, value, headers) is None:
            builder.close()
            return False
        builder._relative_offset += 1  # the batch's record count, as aiokafka's append keeps it
        return True


class BatchSender:
    """Hands RecordBatches to the app's aiokafka producer: at least once, the plain one;
    exactly once (`exactly_once`), the transactional producer of the batch's source."""

    def __init__(self, app: Any) -> None:
        self._app = app
        self._producer = app.producer._ensure_producer()
        self.exactly_once: bool = getattr(app, "commit_gate", None) is not None

    def batch(self, size_bytes: int, *, transactional: bool = False) -> RecordBatch:
        """An empty batch of size_bytes, compressed as the producer compresses (a
        transactional one for a transaction: the app's producers share their settings)."""
        return RecordBatch(
            size_bytes,
            self._producer._message_accumulator._compression_type,
            transactional=transactional,
        )

    async def partition_count(self, topic: str) -> int:
        """topic's partition count (fetching its metadata once if needed)."""
        return await partition_count(self._producer.client, topic)

    def _producer_of(self, source: Source | None) -> Any:
        if source is None:
            return self._producer
        tid = transactional_id(self._app, *source)
        return self._app.producer._transaction_producers.get(tid)

    def unsent(
        self, topic: str, partitions: Iterable[int], source: Source | None = None
    ) -> set[int]:
        """Those of topic's partitions for which the producer (source's, exactly once) still
        holds an unsent batch."""
        producer = self._producer_of(source)
        if producer is None:
            return set()
        batches = producer._message_accumulator._batches
        return {p for p in partitions if batches.get(TopicPartition(topic, p))}

    async def send(
        self, batch: RecordBatch, topic: str, partition: int, source: Source | None = None
    ) -> asyncio.Future[Any]:
        """Hand batch to the producer (into source's transaction, when given); the future
        resolves when the broker acks it. Raises TransactionFailed for a transaction that
        will be aborted."""
        if source is None:
            plain: asyncio.Future[Any] = await self._producer.send_batch(
                batch._builder, topic, partition=partition
            )
            return plain
        app = self._app
        tid = transactional_id(app, *source)
        guard = app.transaction_guard
        if guard is not None and guard.failed(tid):
            raise TransactionFailed(tid)
        producer = self._producer_of(source)
        try:
            if producer is None:
                raise IllegalOperation(f"no producer for {tid}")
            sent: asyncio.Future[Any] = await producer.send_batch(
                batch._builder, topic, partition=partition
            )
        except IllegalOperation:
            # As in Sender.in_transaction: begin the partition's transaction if it is still
            # ours (a stale lane must not start a producer that fences the new owner's).
            if TP(*source) not in app.consumer.assignment():
                raise
            await app.producer.begin_transaction(tid)
            sent = await self._producer_of(source).send_batch(
                batch._builder, topic, partition=partition
            )
        return sent
