"""Calls whose tool never waits run as they are read: no task, replies sent in batches.

On a fast tool the worker's cost was the asyncio machinery around the call (a task, several
futures and an awaited send per reply), not the tool. A plain call whose tool cannot suspend
(`Tool.never_waits`) runs here instead, in the consumer's own task, on its one and only step.
Its reply joins a record batch for its reply partition; the batches go to the producer at the
end of each fetch, or earlier when a later call of the same key takes the scheduled path; the
calls are acked when the broker acks their batch (contract §8). Everything else is handed back to
the scheduled path (the route's jobs): another tool, a failure (its retries go on there), a
key whose earlier call is still scheduled, tracing, and exactly-once mode, where replies
belong to transactions.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import orjson

from stream_adapter import logs
from stream_adapter.envelope import Envelope, parse_envelope
from stream_adapter.errors import AdapterError
from stream_adapter.partitions import partition_for
from stream_adapter.replies import Reply, ok_reply
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
from stream_adapter.tools import Tool

BATCH_BYTES = 512 << 10
"""Record batch size: well under the broker's default 1 MiB message limit."""
DRAIN_TIMEOUT_S = 30.0
"""Longest a rebalance or shutdown waits for the broker to ack held replies."""
MAX_INLINE_REPLY_BYTES = 64 << 10
"""A larger reply takes the scheduled path, so one big reply never fails a whole batch."""
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


@dataclass(slots=True)
class _Batch:
    records: RecordBatch
    messages: list[Any] = field(default_factory=list)
    tools: dict[str, int] = field(default_factory=dict)


class InlineCalls:
    """The lane: offer a call; flush at the end of each fetch; drain before a rebalance.

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
        self._batches: dict[int, _Batch] = {}
        self._full: list[tuple[int, _Batch]] = []
        self._keys: set[Hashable] = set()
        self._partitions = 0
        self._crash_armed = faults.armed(faults.CALL_REPLIED)
        self._held = 0  # calls taken and not yet acked or handed on
        self._idle = asyncio.Event()
        self._idle.set()
        self._flushing = asyncio.Lock()
        self._tick: asyncio.TimerHandle | None = None
        self._ticks: set[asyncio.Task[None]] = set()

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
        try:
            envelope = parse_envelope(message.value, message_id=message_id, source=self._source)
        except AdapterError:
            return NOT_INLINE
        tool = self._tool(envelope.tool) if envelope.approval_id is None else None
        if tool is None:
            return Handoff(envelope=envelope)
        started = time.perf_counter()
        step = ctx.executor.run_tool(
            tool, envelope.arguments, run_id=envelope.run_id, call_id=envelope.call_id
        )
        try:
            step.send(None)
        except StopIteration as done:
            result = done.value
        except AdapterError as exc:
            return Handoff(envelope=envelope, failed=exc)
        else:  # never_waits says this cannot happen; run it again where waiting is allowed
            step.close()
            logs.event(logs.ERROR, "inline tool waited", tool=tool.name)
            return Handoff(envelope=envelope)
        if ctx.metrics is not None:
            ctx.metrics.observe(tool.name, time.perf_counter() - started)
        reply = ok_reply(tool.name, envelope.run_id, envelope.call_id, result)
        value = orjson.dumps(reply)
        if len(value) > MAX_INLINE_REPLY_BYTES:
            return Handoff(reply=reply)
        self._append(message, envelope.run_id.encode(), value, message_id, tool.name)
        self._keys.add(key)
        self._held += 1
        self._idle.clear()
        return None

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

    def _append(self, message: Any, key: bytes, value: bytes, message_id: str, tool: str) -> None:
        partition = partition_for(key, self._partitions)
        headers = [("message-id", message_id.encode()), ("content-type", CONTENT_TYPE)]
        batch = self._batches.get(partition)
        if batch is None:
            batch = self._batches[partition] = _Batch(self._sender.batch(BATCH_BYTES))
        if not batch.records.append(key, value, headers):
            self._full.append((partition, batch))
            batch = self._batches[partition] = _Batch(self._sender.batch(BATCH_BYTES))
            batch.records.append(key, value, headers)
        batch.messages.append(message)
        batch.tools[tool] = batch.tools.get(tool, 0) + 1

    async def flush(self, *, wait: bool = True) -> None:
        """Hand batches to the producer; their calls are acked when the broker acks them.

        wait=False (the end of a fetch round) keeps a partition's batches while the producer
        still has an unsent batch of that partition, rather than wait for it to go: they fill
        on and go at a later round or tick. A fetch round then never waits on the broker.
        """
        async with self._flushing:  # one flush at a time keeps each partition's order
            if not self._batches and not self._full:
                return
            ready = self._full + list(self._batches.items())
            self._full, self._batches = [], {}
            busy: set[int] = set()
            if not wait:
                busy = self._sender.unsent(self._topic, (p for p, _ in ready))
            for partition, batch in ready:
                if partition in busy:
                    self._keep(partition, batch)
                    continue
                try:
                    sent = await self._sender.send(batch.records, self._topic, partition)
                except Exception as exc:  # the producer refused it: these calls go again
                    self._failed(batch, exc)
                    continue
                sent.add_done_callback(partial(self._sent, batch))
            if busy:
                self._tick_soon()
            else:
                self._keys.clear()

    def _keep(self, partition: int, batch: _Batch) -> None:
        """Put an unsent batch back, behind any still kept for its partition."""
        current = self._batches.get(partition)
        if current is None:
            self._batches[partition] = batch
        else:  # batch is older than the open one (full ones come first in `ready`)
            self._full.append((partition, batch))

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
        self._release(len(batch.messages))

    def _failed(self, batch: _Batch, exc: BaseException | None) -> None:
        """A batch that never became durable: its calls go again on the scheduled path."""
        for message in batch.messages:
            self._redo(message, exc)
        self._release(len(batch.messages))

    def _release(self, count: int) -> None:
        self._held -= count
        if not self._held:
            self._idle.set()


async def inline_lane(ctx: FlowContext, links: LaneLinks) -> InlineCalls:
    """The calls route's lane (built by the route on the worker's loop at its first record)."""
    lane = InlineCalls(ctx, links.sender, ack=links.ack, redo=links.redo)
    await lane.start()
    return lane
