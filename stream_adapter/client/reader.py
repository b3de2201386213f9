"""One reader of the replies topic shared by every call of a client.

Replies are keyed by run_id, so a call's replies land on the partition Kafka's default
partitioner (murmur2) picks for its run_id. The reader assigns only those partitions (no
consumer group) and reads them `read_committed`. A partition is positioned before the call is
produced: at its end offset, or, to pick up an earlier call again, at the first offset written
at or after a given time (`offsets_for_times`). A partition no call has watched for
`release_after_s` is unassigned again.

Those offsets are asked on a second consumer that never fetches: the broker answers one request
per connection at a time, so on the reading consumer's connection a lookup waits behind the
fetch in flight, which the broker holds up to `fetch_max_wait_ms` when no reply comes (a call
to a partition not yet read then waited some 450 ms of the default 500 before it was sent).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from dataclasses import dataclass, field

import orjson
from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError
from aiokafka.structs import TopicPartition

from stream_adapter.core.errors import AdapterError
from stream_adapter.core.replies import Reply
from stream_adapter.kafka import clients as kafka_clients
from stream_adapter.kafka.partitions import partition_for

__all__ = ["ReplyReader", "Watch"]

log = logging.getLogger(__name__)

_Key = tuple[str, str]


@dataclass(eq=False)
class Watch:
    """The replies of one call (run_id, call_id) as the reader finds them, in offset order."""

    run_id: str
    call_id: str
    partition: int
    start: int
    """The first offset of `partition` this watch takes replies from."""
    queue: asyncio.Queue[Reply | BaseException] = field(default_factory=asyncio.Queue)
    last: int = -1
    """The offset of the last reply handed over: a partition read again yields nothing twice."""

    def __post_init__(self) -> None:
        self.last = self.start - 1

    async def next(self) -> Reply:
        """The next reply; the reader's failure when it stopped."""
        item = await self.queue.get()
        if isinstance(item, BaseException):
            self.queue.put_nowait(item)  # every later next() fails the same way
            raise item
        return item


class ReplyReader:
    """Reads the partitions its watched run ids map to and hands each reply to its watches."""

    def __init__(
        self,
        consumer: AIOKafkaConsumer,
        topic: str,
        partitions: int,
        *,
        offsets: AIOKafkaConsumer | None = None,
        release_after_s: float = 60.0,
        poll_ms: int = 100,
    ) -> None:
        self._consumer = consumer
        self._offsets = offsets if offsets is not None else consumer
        self._topic = topic
        self._partitions = partitions
        self._release_after_s = release_after_s
        self._poll_ms = poll_ms
        self._watches: dict[_Key, list[Watch]] = defaultdict(list)
        self._watching: dict[int, int] = defaultdict(int)  # partition -> watches on it
        self._idle_since: dict[int, float] = {}
        self._next: dict[int, int] = {}  # assigned partition -> next offset to read
        self._placing: dict[int, asyncio.Future[None]] = {}
        self._task: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None

    @property
    def assigned(self) -> frozenset[int]:
        """The partitions the reader reads now."""
        return frozenset(self._next)

    def partition(self, run_id: str) -> int:
        """The replies partition of run_id under Kafka's default partitioner."""
        return partition_for(run_id.encode(), self._partitions)

    def start(self) -> None:
        """Start reading (in a task of the running loop)."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="reply-reader")

    async def stop(self) -> None:
        """Stop reading; every open watch then fails with an AdapterError."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def watch(self, run_id: str, call_id: str, *, since_ms: int | None = None) -> Watch:
        """A watch of (run_id, call_id)'s replies, the partition positioned before it returns.

        Without since_ms, replies from now on (its call is still to be produced); with it,
        from the first offset the partition got at or after since_ms (epoch milliseconds).
        """
        if self._failure is not None:
            raise self._failure
        partition = self.partition(run_id)
        while partition in self._placing:  # another watch is positioning it: share that
            await asyncio.shield(self._placing[partition])
        if since_ms is None and partition in self._next:
            start = self._next[partition]
        else:
            placing = asyncio.get_running_loop().create_future()
            self._placing[partition] = placing
            try:
                start = await self._offset(partition, since_ms)
                self._place(partition, start)
            finally:
                del self._placing[partition]
                placing.set_result(None)
        watch = Watch(run_id, call_id, partition, start)
        self._watches[(run_id, call_id)].append(watch)
        self._watching[partition] += 1
        self._idle_since.pop(partition, None)
        return watch

    def unwatch(self, watch: Watch) -> None:
        """Stop handing replies to watch; its partition may be released once idle."""
        watches = self._watches.get((watch.run_id, watch.call_id))
        if not watches or watch not in watches:
            return
        watches.remove(watch)
        if not watches:
            del self._watches[(watch.run_id, watch.call_id)]
        self._watching[watch.partition] -= 1
        if self._watching[watch.partition] == 0:
            del self._watching[watch.partition]
            self._idle_since[watch.partition] = asyncio.get_running_loop().time()

    async def _offset(self, partition: int, since_ms: int | None) -> int:
        tp = TopicPartition(self._topic, partition)
        try:
            if since_ms is not None:
                found = await self._offsets.offsets_for_times({tp: max(0, since_ms)})
                if found.get(tp) is not None:
                    return int(found[tp].offset)
            ends = await self._offsets.end_offsets([tp])
        except KafkaError as exc:
            raise kafka_clients.kafka_error(exc, f"read {self._topic}") from None
        return int(ends[tp])

    def _place(self, partition: int, offset: int) -> None:
        """Read partition from offset (earlier than where it is, when already assigned)."""
        if partition in self._next:
            offset = min(offset, self._next[partition])
        self._next[partition] = offset
        self._reassign()

    def _reassign(self) -> None:
        """aiokafka's assign replaces the whole assignment: every partition is sought again."""
        tps = {p: TopicPartition(self._topic, p) for p in sorted(self._next)}
        self._consumer.assign(list(tps.values()))
        for partition, tp in tps.items():
            self._consumer.seek(tp, self._next[partition])

    def _release_idle(self) -> None:
        now = asyncio.get_running_loop().time()
        idle = [
            p
            for p, since in self._idle_since.items()
            if now - since >= self._release_after_s and p not in self._placing
        ]
        if not idle:
            return
        for partition in idle:
            del self._idle_since[partition]
            self._next.pop(partition, None)
        self._reassign()

    async def _run(self) -> None:
        try:
            while True:
                if not self._next:
                    await asyncio.sleep(self._poll_ms / 1000)
                    continue
                batches = await self._consumer.getmany(timeout_ms=self._poll_ms)
                for tp, records in batches.items():
                    for record in records:
                        self._hand_over(tp.partition, record.offset, record.value)
                self._release_idle()
        except asyncio.CancelledError:
            self._fail(AdapterError("the client was closed"))
            raise
        except Exception as exc:
            failure = kafka_clients.kafka_error(exc, f"read {self._topic}")
            log.error("reply reader stopped: %s", type(exc).__name__)
            self._fail(failure)

    def _hand_over(self, partition: int, offset: int, value: bytes | None) -> None:
        if partition not in self._next:
            return
        # aiokafka returns only records at the position it reads from (after a seek back, the
        # earlier ones again), so the next offset is this record's successor.
        self._next[partition] = offset + 1
        if value is None:
            return
        try:
            reply = orjson.loads(value)
        except orjson.JSONDecodeError:
            return
        if type(reply) is not dict:
            return
        run_id, call_id = reply.get("run_id"), reply.get("call_id")
        if type(run_id) is not str or type(call_id) is not str:
            return
        for watch in self._watches.get((run_id, call_id), ()):
            if offset > watch.last:
                watch.last = offset
                watch.queue.put_nowait(reply)

    def _fail(self, failure: BaseException) -> None:
        self._failure = failure
        for watches in self._watches.values():
            for watch in watches:
                watch.queue.put_nowait(failure)
