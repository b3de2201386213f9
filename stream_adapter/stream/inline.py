"""Calls whose tool never waits run as they are read: no task, replies sent in batches.

On a fast tool the worker's cost was the asyncio machinery around the call (a task, several
futures and an awaited send per reply), not the tool. A plain call whose tool cannot suspend
(`Tool.never_waits`) runs here instead, in the consumer's own task, on its one and only step.
Its reply joins a record batch for its reply partition; the batches go to the producer at the
end of each fetch round and of each slice of a long one (engine/consumer.py), or earlier when
a later call of the same key takes the scheduled path; the calls are acked when the broker
acks their batch (contract §8). Everything else is handed back to
the scheduled path (the route's jobs): another tool, a failure (its retries go on there), a
key whose earlier call is still scheduled, and tracing.

Exactly once, a batch holds the replies of one input partition and goes into that
partition's transaction, so a commit carries many calls' replies at once; around each commit
the lane is paused (`paused`): it sends nothing, and waits until nothing it sent is unacked,
so the commit's offsets and its replies cover the same calls (engine/routes.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Hashable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import orjson

from stream_adapter.core import logs
from stream_adapter.core.envelope import Envelope, parse_envelope
from stream_adapter.core.errors import AdapterError
from stream_adapter.core.executor import WAITED
from stream_adapter.core.replies import Reply, ok_reply
from stream_adapter.core.tools import Tool
from stream_adapter.kafka.partitions import partition_for
from stream_adapter.stream import faults
from stream_adapter.stream.calls import process_call, send_reply
from stream_adapter.stream.context import FlowContext
from stream_adapter.stream.engine import (
    BatchSender,
    LaneLinks,
    Process,
    RecordBatch,
    message_id_of,
)
from stream_adapter.stream.outputs import CONTENT_TYPE

BATCH_BYTES = 512 << 10
"""Record batch size: well under the broker's default 1 MiB message limit."""
DRAIN_TIMEOUT_S = 30.0
"""Longest a rebalance or shutdown waits for the broker to ack held replies."""
MAX_INLINE_REPLY_BYTES = 64 << 10
"""A larger reply takes the scheduled path, so one big reply never fails a whole batch."""
FRAGMENT_FROM_BYTES = 512
"""From this size a result's JSON from the result check goes into its reply as it is. What
encoding again costs depends on the result's shape (nested objects cost, long strings hardly):
a 160-byte flat result gains nothing from the wrapping, a 530-byte nested one takes 0.39 of
the time; from 512 bytes no shape measured lost."""
TICK_S = 0.001
"""How soon batches kept back at the end of a round are tried again."""


@dataclass(frozen=True, slots=True)
class Handoff:
    """A call the lane did not finish: the scheduled path takes it from the start (from its
    parsed `envelope` when there is one), or, when the tool already ran, goes on from
    `failed` (its first attempt's error) or sends `reply`."""

    envelope: Envelope | None = None
    failed: AdapterError | None = None
    reply: Reply | None = None


NOT_INLINE = Handoff()


Source = tuple[str, int] | None
"""Exactly once, the input partition whose transaction a batch joins; None at least once."""
Slot = tuple[Source, int]
"""Where a batch goes: its source's transaction and its reply partition."""


@dataclass(slots=True)
class _Batch:
    records: RecordBatch
    source: Source
    messages: list[Any] = field(default_factory=list)
    tools: dict[str, int] = field(default_factory=dict)


class InlineCalls:
    """The lane: offer a call; flush at the end of each fetch round or slice; drain before a
    rebalance.

    `ack(messages)` acks calls whose replies the broker acked; `redo(message, exc)` hands a
    call whose reply never became durable (exc says why; None: its send was cancelled) to the
    scheduled path. Taken calls are not tracked as Faust's unacked messages (a weak set,
    costly per record): `drain` stands in for that.
    """

    def __init__(
        self,
        ctx: FlowContext,
        sender: BatchSender,
        ack: Callable[[list[Any]], Any],
        redo: Callable[[Any, BaseException | None], Any],
    ) -> None:
        self._ctx = ctx
        self._sender = sender
        self._ack = ack
        self._redo = redo
        self._topic = ctx.settings.replies_topic
        self._source = ctx.settings.source
        self._tools: dict[str, Tool | None] = {}
        self._batches: dict[Slot, _Batch] = {}
        self._full: list[tuple[Slot, _Batch]] = []
        self._keys: set[Hashable] = set()
        self._partitions = 0
        self._crash_armed = faults.armed(faults.CALL_REPLIED)
        self._held = 0  # calls taken and not yet acked or handed on
        self._idle = asyncio.Event()
        self._idle.set()
        self._flushing = asyncio.Lock()
        self._tick: asyncio.TimerHandle | None = None
        self._ticks: set[asyncio.Task[None]] = set()
        self._transactional = sender.exactly_once
        self._held_by: dict[Source, int] = {}  # exactly once: calls held per input partition
        self._settled: dict[Source, asyncio.Future[None]] = {}
        self._in_flight = 0  # batches handed to the producer, not yet acked or failed
        self._none_in_flight = asyncio.Event()
        self._none_in_flight.set()
        self._paused = False
        self._resumed = asyncio.Event()
        self._resumed.set()

    async def start(self) -> None:
        """Learn the replies topic's partition count (once; the lane's partitioner needs it)."""
        if not self._partitions:
            self._partitions = await self._sender.partition_count(self._topic)

    def holds(self, key: Hashable) -> bool:
        """True when a reply of key waits in an unsent batch (send it before the key's next)."""
        return key in self._keys

    def offer(self, message: Any, key: Hashable) -> Process | None:
        """Run the call if it can be run here; None when taken, else the scheduled work."""
        handoff = self.take(message, key)
        return None if handoff is None else self.resume(handoff)

    def resume(self, handoff: Handoff) -> Process:
        """The scheduled work for a call the lane handed on."""
        ctx = self._ctx
        if handoff.reply is not None:
            reply = handoff.reply
            return lambda delivery: send_reply(ctx, delivery, reply)
        envelope, failed = handoff.envelope, handoff.failed
        if envelope is None:
            return lambda delivery: process_call(ctx, delivery)
        return lambda delivery: process_call(ctx, delivery, envelope=envelope, failed=failed)

    def take(self, message: Any, key: Hashable) -> Handoff | None:
        """Run the call if it can be run here; None when done, else what to hand on."""
        ctx = self._ctx
        message_id = message_id_of(message)
        scope = "" if ctx.scopes is None else ctx.scopes.current(message.topic)
        if scope is None:
            return NOT_INLINE  # the call flow learns the topic's id first
        try:
            envelope = parse_envelope(
                message.value, message_id=message_id, source=self._source, scope=scope
            )
        except AdapterError:
            return NOT_INLINE
        tool = self._tool(envelope.tool) if envelope.approval_id is None else None
        if tool is None:
            return Handoff(envelope=envelope)
        started = time.perf_counter()
        try:
            ran = ctx.executor.run_now_encoded(
                tool, envelope.arguments, run_id=envelope.run_id, call_id=envelope.call_id
            )
        except AdapterError as exc:
            return Handoff(envelope=envelope, failed=exc)
        if ran is WAITED:  # never_waits says it cannot; run it again where waiting is allowed
            logs.event(logs.ERROR, "inline tool waited", tool=tool.name)
            return Handoff(envelope=envelope)
        if ctx.metrics is not None:
            ctx.metrics.observe(tool.name, time.perf_counter() - started)
        result, encoded = ran
        # From FRAGMENT_FROM_BYTES the result check's JSON goes in as it is, not encoded again.
        as_json = orjson.Fragment(encoded) if len(encoded) >= FRAGMENT_FROM_BYTES else result
        value = orjson.dumps(ok_reply(tool.name, envelope.run_id, envelope.call_id, as_json))
        if len(value) > MAX_INLINE_REPLY_BYTES:
            return Handoff(reply=ok_reply(tool.name, envelope.run_id, envelope.call_id, result))
        source = (message.topic, message.partition) if self._transactional else None
        self._append(message, source, envelope.run_id.encode(), value, message_id, tool.name)
        self._keys.add(key)
        if not self._held:
            self._idle.clear()
        self._held += 1
        if source is not None:
            self._held_by[source] = self._held_by.get(source, 0) + 1
        return None

    def settled(self, topic: str, partition: int) -> asyncio.Future[None] | None:
        """Exactly once: resolved once every call of the partition taken so far is acked or
        failed; None when none is held."""
        source = (topic, partition)
        if not self._held_by.get(source):
            return None
        future = self._settled.get(source)
        if future is None:
            future = self._settled[source] = asyncio.get_running_loop().create_future()
        return future

    @asynccontextmanager
    async def paused(self) -> AsyncIterator[None]:
        """Send nothing, and wait until nothing sent is unacked (a commit is taking the acked
        offsets); calls are still taken meanwhile, their replies held until it ends."""
        self._paused = True
        self._resumed.clear()
        try:
            async with self._flushing:  # a flush under way hands its batches on first
                pass
            await self._none_in_flight.wait()
            yield
        finally:
            self._paused = False
            self._resumed.set()
            if self._batches or self._full:
                self._tick_soon()

    def _tool(self, name: str | None) -> Tool | None:
        """The tool if calls of it may run here; None for unknown, confirm or waiting tools."""
        if name is None:
            return None
        try:
            return self._tools[name]
        except KeyError:
            pass
        try:
            tool = self._ctx.executor.resolve(name, self._ctx.tools)
        except AdapterError:
            return None  # unknown names are not cached: producers choose them
        usable = not tool.confirm and tool.never_waits and tool.timeout_s is None
        self._tools[name] = tool if usable else None
        return self._tools[name]

    def _append(
        self,
        message: Any,
        source: Source,
        key: bytes,
        value: bytes,
        message_id: str,
        tool: str,
    ) -> None:
        slot = (source, partition_for(key, self._partitions))
        headers = [("message-id", message_id.encode()), ("content-type", CONTENT_TYPE)]
        batch = self._batches.get(slot)
        if batch is None:
            batch = self._batches[slot] = self._new_batch(source)
        if not batch.records.append(key, value, headers):
            self._full.append((slot, batch))
            batch = self._batches[slot] = self._new_batch(source)
            batch.records.append(key, value, headers)
        batch.messages.append(message)
        batch.tools[tool] = batch.tools.get(tool, 0) + 1

    def _new_batch(self, source: Source) -> _Batch:
        return _Batch(self._sender.batch(BATCH_BYTES, transactional=source is not None), source)

    async def flush(self, *, wait: bool = True) -> None:
        """Hand batches to the producer; their calls are acked when the broker acks them.

        wait=False (the end of a fetch round or slice) keeps a partition's batches while the
        producer still has an unsent batch of that partition, rather than wait for it to go:
        they fill on and go at a later round or tick. A fetch round then never waits on the
        broker.
        """
        while self._paused:
            if not wait:
                return  # the pause's end sends them
            await self._resumed.wait()
        async with self._flushing:  # one flush at a time keeps each partition's order
            if self._paused or (not self._batches and not self._full):
                if self._paused:
                    self._tick_soon()
                return
            ready = self._full + list(self._batches.items())
            self._full, self._batches = [], {}
            busy: set[Slot] = set()
            if not wait:
                busy = self._busy(ready)
            for slot, batch in ready:
                if slot in busy:
                    self._keep(slot, batch)
                    continue
                source, partition = slot
                try:
                    sent = await self._sender.send(batch.records, self._topic, partition, source)
                except Exception as exc:  # the producer refused it: these calls go again
                    self._failed(batch, exc)
                    continue
                self._in_flight += 1
                self._none_in_flight.clear()
                sent.add_done_callback(partial(self._sent, batch))
            if busy:
                self._tick_soon()
            else:
                self._keys.clear()

    def _busy(self, ready: list[tuple[Slot, _Batch]]) -> set[Slot]:
        """The slots whose producer still holds an unsent batch of their partition."""
        by_source: dict[Source, set[int]] = {}
        for (source, partition), _ in ready:
            by_source.setdefault(source, set()).add(partition)
        return {
            (source, partition)
            for source, partitions in by_source.items()
            for partition in self._sender.unsent(self._topic, partitions, source)
        }

    def _keep(self, slot: Slot, batch: _Batch) -> None:
        """Put an unsent batch back, behind any still kept for its slot."""
        current = self._batches.get(slot)
        if current is None:
            self._batches[slot] = batch
        else:  # batch is older than the open one (full ones come first in `ready`)
            self._full.append((slot, batch))

    def _tick_soon(self) -> None:
        if self._tick is None:
            self._tick = asyncio.get_running_loop().call_later(TICK_S, self._on_tick)

    def _on_tick(self) -> None:
        self._tick = None
        if self._batches or self._full:
            task = asyncio.ensure_future(self.flush(wait=False))
            self._ticks.add(task)
            task.add_done_callback(self._ticks.discard)

    async def drain(self, timeout_s: float = DRAIN_TIMEOUT_S) -> None:
        """Send what is held and wait, at most timeout_s, until every call taken is acked or
        handed on (a rebalance or shutdown; what is left is simply not committed)."""
        await self.flush()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except TimeoutError:
            logs.event(logs.WARNING, "inline calls not acked in time", pending=self._held)

    def _sent(self, batch: _Batch, fut: asyncio.Future[Any]) -> None:
        self._in_flight -= 1
        if not self._in_flight:
            self._none_in_flight.set()
        if fut.cancelled() or fut.exception() is not None:
            self._failed(batch, fut.exception() if not fut.cancelled() else None)
            return
        metrics = self._ctx.metrics
        if metrics is not None:
            for tool, count in batch.tools.items():
                metrics.replied(tool, "ok", count)
        acked = batch.messages
        if self._crash_armed:
            acked = []
            for message in batch.messages:
                try:
                    faults.crash_point(faults.CALL_REPLIED)
                except faults.InjectedFault as exc:
                    self._redo(message, exc)
                    continue
                acked.append(message)
        self._ack(acked)
        self._release(batch)

    def _failed(self, batch: _Batch, exc: BaseException | None) -> None:
        """A batch that never became durable: its calls go again on the scheduled path
        (exactly once, their transaction fails instead: see engine/routes.py)."""
        for message in batch.messages:
            self._redo(message, exc)
        self._release(batch)

    def _release(self, batch: _Batch) -> None:
        count = len(batch.messages)
        self._held -= count
        if not self._held:
            self._idle.set()
        source = batch.source
        if source is not None:
            left = self._held_by[source] - count
            if left:
                self._held_by[source] = left
            else:
                del self._held_by[source]
                future = self._settled.pop(source, None)
                if future is not None and not future.done():
                    future.set_result(None)


async def inline_lane(ctx: FlowContext, links: LaneLinks) -> InlineCalls:
    """The calls route's lane (built by the route on the worker's loop at its first record)."""
    lane = InlineCalls(ctx, links.sender, ack=links.ack, redo=links.redo)
    await lane.start()
    return lane
