"""Reading what the topology wrote: replies as they arrive, whole topics, and group lag."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition

from stream_adapter.kafka import clients as kafka_clients
from stream_adapter.kafka.partitions import topic_partitions
from stream_adapter.settings import Settings
from stream_adapter.stream.topics import approval_requests_topic

FETCH_BYTES = 8 << 20  # above any message the runs produce (1 MiB + 1 envelopes and their copies)

ReplyHook = Callable[[dict[str, Any]], Awaitable[None]]


async def wait_until(
    check: Callable[[], Awaitable[bool]], *, timeout_s: float, interval_s: float = 0.2
) -> bool:
    """Await check() until it is true (True) or the deadline passes (False)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if await check():
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(interval_s)


def _consumer(
    settings: Settings, *, read_committed: bool, group: str | None = None
) -> AIOKafkaConsumer:
    return kafka_clients.consumer(
        settings,
        group_id=group,
        auto_offset_reset="earliest",
        isolation_level="read_committed" if read_committed else "read_uncommitted",
        max_partition_fetch_bytes=FETCH_BYTES,
        fetch_max_bytes=FETCH_BYTES * 4,
    )


async def _partitions(consumer: AIOKafkaConsumer, topic: str) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in await topic_partitions(consumer, topic)]


class ReplyReader:
    """Follows the replies topic from its beginning; replies are kept per call_id and per the
    `message-id` header (the delivery id of the call they answer).

    `on_reply` hooks run for each reply in arrival order (the automatic reviewer is one);
    `changed` is set whenever replies arrived, for waiters that re-check a condition.
    """

    def __init__(self, settings: Settings, *, read_committed: bool) -> None:
        self.settings = settings
        self.read_committed = read_committed
        self.by_call: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.by_message: dict[str, list[dict[str, Any]]] = defaultdict(list)  # by delivery id
        self.places: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
        """Per call_id, (partition, offset, timestamp ms) of each reply in by_call."""
        self.count = 0
        self.arrivals: list[float] = []
        """When (time.monotonic) each batch of replies arrived, in order."""
        self.hooks: list[ReplyHook] = []
        self.changed = asyncio.Event()
        self._consumer = _consumer(settings, read_committed=read_committed)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._consumer.start()
        tps = await _partitions(self._consumer, self.settings.replies_topic)
        self._consumer.assign(tps)
        await self._consumer.seek_to_beginning(*tps)
        self._task = asyncio.create_task(self._follow())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._consumer.stop()

    async def _follow(self) -> None:
        while True:
            batches = await self._consumer.getmany(timeout_ms=200)
            for messages in batches.values():
                for message in messages:
                    reply = orjson.loads(message.value)
                    call_id = str(reply.get("call_id"))
                    self.by_call[call_id].append(reply)
                    self.places[call_id].append(
                        (message.partition, message.offset, message.timestamp)
                    )
                    headers = dict(message.headers or ())
                    message_id = headers.get("message-id", b"").decode(errors="replace")
                    self.by_message[message_id].append(reply)
                    self.count += 1
                    for hook in self.hooks:
                        await hook(reply)
            if batches:
                self.arrivals.append(time.monotonic())
                self.changed.set()

    async def until(self, check: Callable[[], bool], *, timeout_s: float) -> bool:
        """Wait (woken by arriving replies) until check() holds; False past the deadline."""
        deadline = time.monotonic() + timeout_s
        while not check():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(remaining, 1.0))
        return True


async def read_topic(
    settings: Settings, topic: str, *, read_committed: bool = False, timeout_s: float = 60.0
) -> list[Any]:
    """Every message of topic up to its end offsets at the time of the call.

    TimeoutError when the end is not reached within timeout_s: a partial read never passes
    for a whole one. A read_committed reader may stop short of the end (a trailing commit
    marker it never returns): it stops once IDLE_POLLS polls in a row bring nothing.
    """
    consumer = await kafka_clients.start(
        settings, _consumer(settings, read_committed=read_committed)
    )
    out: list[Any] = []
    try:
        tps = await _partitions(consumer, topic)
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        deadline = time.monotonic() + timeout_s
        idle = 0
        while not all([await consumer.position(tp) >= ends[tp] for tp in tps]):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic} not read to its end within {timeout_s:g}s")
            batches = await consumer.getmany(timeout_ms=300)
            for messages in batches.values():
                out.extend(messages)
            idle = 0 if batches else idle + 1
            if read_committed and idle >= IDLE_POLLS:
                break
    finally:
        await consumer.stop()
    return out


IDLE_POLLS = 5
"""Empty polls after which a read_committed `read_topic` takes what it has as the whole."""


async def group_lag(settings: Settings, group: str, topics: Iterable[str]) -> int:
    """Sum over the topics' partitions of (end offset - committed offset) for group."""
    consumer = _consumer(settings, read_committed=False, group=group)
    await consumer.start()
    try:
        lag = 0
        for topic in topics:
            tps = await _partitions(consumer, topic)
            ends = await consumer.end_offsets(tps)
            for tp in tps:
                committed = await consumer.committed(tp)
                lag += ends[tp] - (committed or 0)
        return lag
    finally:
        await consumer.stop()


def consumed_topics(settings: Settings) -> tuple[str, ...]:
    """What the worker group consumes, so its lag is the run's backlog."""
    return (settings.calls_topic, settings.decisions_topic, approval_requests_topic(settings))


async def settle_lag(settings: Settings, *, timeout_s: float) -> int:
    """Wait until the group's lag is 0 or the deadline passes; the last lag measured."""
    last = -1

    async def zero() -> bool:
        nonlocal last
        last = await group_lag(settings, settings.app_id, consumed_topics(settings))
        return last == 0

    await wait_until(zero, timeout_s=timeout_s, interval_s=0.5)
    return last


def quiet_kafka_logs() -> None:
    """aiokafka logs every refused connection while the broker is down; the run expects them."""
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
