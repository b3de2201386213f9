"""What the topology writes: replies, dead letters and internal approval requests.

Every send here waits for the broker's acknowledgement, so a caller that acks its input
event afterwards never lets a commit pass an unwritten output (SPEC §8).
"""

from __future__ import annotations

import base64
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiokafka.errors import IllegalOperation
from faust.types import TP

from stream_adapter.errors import AdapterError
from stream_adapter.replies import Reply
from stream_adapter.stream.commit_gate import current_section
from stream_adapter.stream.metrics import Metrics
from stream_adapter.stream.partitioner import known_partitions, partition_for
from stream_adapter.stream.transactions import TransactionFailed, transactional_id

CONTENT_TYPE = b"application/json"

Headers = list[tuple[str, bytes]]
"""Extra headers for a reply (the trace context when tracing is on)."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """One consumed message: where it came from and its raw bytes."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: dict[str, bytes] = field(default_factory=dict)

    @property
    def message_id(self) -> str:
        """The delivery id: `topic:partition:offset`, stable across redeliveries."""
        return f"{self.topic}:{self.partition}:{self.offset}"

    def to_json(self) -> dict[str, Any]:
        """A JSON-safe copy, carried inside internal requests so dead letters keep the bytes."""
        return {
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "key": None if self.key is None else base64.b64encode(self.key).decode(),
            "value": base64.b64encode(self.value).decode(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Delivery:
        key = data.get("key")
        return cls(
            topic=data["topic"],
            partition=int(data["partition"]),
            offset=int(data["offset"]),
            key=None if key is None else base64.b64decode(key),
            value=base64.b64decode(data["value"]),
        )


current_delivery: ContextVar[Delivery] = ContextVar("stream_adapter_delivery")
"""The message the running job processes: its transaction in exactly-once mode."""


class Outputs:
    """Sends to the replies, dead-letter and approval-request topics, waiting for each ack.

    With `exactly_once`, replies, dead letters and table writes join the transaction of the
    message being processed (`current_delivery`), whatever partition they go to. Faust's own
    routing picks a transaction from the destination's partition as its *consumer* sees it,
    and finds none for topics it does not consume, so those sends would silently leave the
    transaction (upstream issue 177): we name it. See commit_gate.py for when they may go.
    """

    def __init__(
        self, app: Any, replies: Any, dlq: Any, requests: Any, *, exactly_once: bool = False
    ) -> None:
        self._app = app
        self._replies = replies
        self._dlq = dlq
        self._requests = requests
        self.exactly_once = exactly_once
        self.metrics: Metrics | None = None

    async def reply(self, reply: Reply, *, message_id: str, headers: Headers | None = None) -> None:
        """Write reply keyed by its run_id, with the SPEC headers (and any extra headers)."""
        sent = [("message-id", message_id.encode()), ("content-type", CONTENT_TYPE)]
        if headers:
            sent.extend(headers)
        await self._emit(self._replies, reply["run_id"].encode(), orjson.dumps(reply), sent)
        if self.metrics is not None:
            self.metrics.replied(reply["tool"], reply["status"])

    async def dead_letter(self, delivery: Delivery, exc: AdapterError, *, attempts: int) -> None:
        """Copy the original message, unchanged, to the DLQ; headers say why."""
        headers = [
            ("error-kind", exc.kind.encode()),
            ("error-status", str(exc.status).encode()),
            ("retryable", b"true" if exc.retryable else b"false"),
            ("attempts", str(attempts).encode()),
            ("source-topic", delivery.topic.encode()),
            ("source-partition", str(delivery.partition).encode()),
            ("source-offset", str(delivery.offset).encode()),
            ("message-id", delivery.message_id.encode()),
            ("failed-at", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()).encode()),
        ]
        await self._emit(self._dlq, delivery.key, delivery.value, headers)
        if self.metrics is not None:
            self.metrics.dead_lettered(delivery.topic, exc.kind)

    async def request(self, approval_id: str, body: dict[str, Any]) -> None:
        """Hand a park or resume request to the owner of approval_id's partition.

        In exactly-once mode this send is outside the transaction (its partition is not the
        event's): the hand-off is at least once, and parking and resuming are idempotent.
        """
        key, value = approval_id.encode(), orjson.dumps(body)
        if self.exactly_once:
            # Outside the transaction on purpose: a transactional write leaves a commit marker
            # after the last request, which Faust's acked-offset commits never pass, so the
            # approvals route's lag would never reach 0. Parking and resuming are idempotent.
            await self.outside_transaction(self._requests.get_topic_name(), key, value, None)
        else:
            await self._plain(self._requests, key, value, None)

    async def _emit(self, topic: Any, key: bytes | None, value: bytes, headers: Any) -> None:
        if self.exactly_once:
            await self.in_transaction(topic.get_topic_name(), key, value, headers)
        else:
            await self._plain(topic, key, value, headers)

    def transaction_of_current(self) -> str:
        """The transactional id of the message being processed."""
        source = current_delivery.get()
        return transactional_id(self._app, source.topic, source.partition)

    async def in_transaction(
        self,
        topic: str,
        key: bytes | None,
        value: bytes,
        headers: Any = None,
        partition: int | None = None,
    ) -> None:
        """Send inside the transaction of the message being processed (any partition)."""
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
            # fails until a restart. Begin it (transactions.py replaces a fatal producer), if
            # the partition is still ours, and try again once; a stale job must not start a
            # producer that fences the new owner's.
            if TP(source.topic, source.partition) not in self._app.consumer.assignment():
                raise
            await producer.begin_transaction(tid)
            pending = await producer.send(
                topic, key, value, partition, None, headers, transactional_id=tid
            )
        await pending

    async def outside_transaction(
        self, topic: str, key: bytes, value: bytes, partition: int | None
    ) -> None:
        """Send with the app's plain producer: durable at once, whatever a transaction does."""
        producer = self._app.producer
        await producer.maybe_start()
        pending = await producer.send(topic, key, value, partition, None, None)
        await pending

    async def _plain(self, topic: Any, key: bytes | None, value: bytes, headers: Any) -> None:
        """At-least-once send straight to the aiokafka producer under Faust's (no Faust Topic
        or produce-signal bookkeeping: about a third of the cost of a reply)."""
        producer = self._app.producer._ensure_producer()
        name = topic.get_topic_name()
        partition = None
        if key is not None:
            # aiokafka's own murmur2 reads a byte at a time; ours picks the same partition.
            count = known_partitions(producer.client, name)
            if count:
                partition = partition_for(key, count)
        pending = await producer.send(name, value, key=key, partition=partition, headers=headers)
        await pending
