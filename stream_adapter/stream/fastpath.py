"""Faust for groups, tables and commits; our own per-message path for the topology's topics.

Faust hands each fetched record to its conductor through `wait_first`, which starts four
asyncio tasks per record, then builds an Event, queues it and lets a Stream pull it out
again; on two cores that, not the tool, caps a stock agent at a few thousand calls a second.
`FastConsumer` keeps Faust's fetching, offset-gap bookkeeping, acks and commits, and hands
records of registered topics straight to a handler: tracked as unacked (so rebalances and
shutdown wait for them, `stream_wait_empty`), acked through the consumer when done.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, cast

import faust
from faust import streams as faust_streams
from faust.transport.drivers import aiokafka as faust_aiokafka

from stream_adapter.stream.commit_gate import CommitGate

Handler = Callable[[Any], Awaitable[None]]
Flush = Callable[[], Awaitable[None]]


class FastConsumer(faust_aiokafka.Consumer):
    """Faust's aiokafka consumer with a direct route for registered topics."""

    handlers: dict[str, Handler]
    flushes: list[Flush]
    """Called after each fetched round of records (routes that batch their outputs)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.handlers = {}
        self.flushes = []

    async def _drain_messages(self, fetcher: Any) -> None:
        """Fetch and dispatch records until the consumer or the fetcher stops."""
        read_offset = self._read_offset
        acks_enabled_for = self.app.topics.acks_enabled_for
        handlers = self.handlers
        slow = self.callback
        unacked = self._unacked_messages
        try:
            while not (self.should_stop or fetcher.should_stop):
                await asyncio.sleep(0)  # getmany may return at once, over and over
                async for tp, message in self.getmany(timeout=1.0):
                    if self.should_stop:
                        break
                    offset = message.offset
                    last = read_offset[tp]
                    if last is not None and offset < last:
                        continue  # seen before a seek; Faust drops these too
                    if last and offset - last > 1 and acks_enabled_for(message.topic):
                        # Offsets never delivered (transaction markers, compaction) must
                        # not hold the committed offset back.
                        await self._add_gap(tp, last + 1, offset)
                    handler = handlers.get(message.topic)
                    if handler is not None:
                        # track_message minus its per-record sensor call: the worker has no
                        # use for Faust's monitor, and it costs several µs a record.
                        unacked.add(message)
                        await handler(message)
                    else:
                        await self.wait_first(slow(message), self.suspend_flow.wait())
                    read_offset[tp] = offset
                for flush in self.flushes:
                    await flush()
        except self.consumer_stopped_errors:
            if not self.transport.app.should_stop:
                raise
        except asyncio.CancelledError:
            if not self.transport.app.should_stop:
                raise

    async def commit(self, *args: Any, **kwargs: Any) -> bool:
        """Faust's commit, held while a job is between its first transactional send and its
        ack (exactly-once mode; see commit_gate.py)."""
        gate: CommitGate | None = getattr(self.app, "commit_gate", None)
        if gate is None:
            return bool(await super().commit(*args, **kwargs))
        async with gate.exclusive():
            return bool(await super().commit(*args, **kwargs))


class FastTransport(faust_aiokafka.Transport):
    """The aiokafka transport, building FastConsumers."""

    Consumer: ClassVar[type[FastConsumer]] = FastConsumer


class FastApp(faust.App):
    """A Faust app whose consumer can route topics to handlers (`route`)."""

    commit_gate: CommitGate | None = None

    def _new_transport(self) -> Any:
        return FastTransport(self.conf.broker_consumer, self)

    def route(self, topic: Any, handler: Handler, flush: Flush | None = None) -> None:
        """Subscribe topic (a Faust topic, one or more names) and hand its records to handler;
        flush, if given, runs after each fetched round."""
        self.topics.add(topic)
        routes: dict[str, Handler] = self.__dict__.setdefault("_fast_routes", {})
        for name in topic.topics:
            routes[name] = handler
        if flush is not None:
            self.__dict__.setdefault("_fast_flushes", []).append(flush)

    def _new_consumer(self) -> Any:
        consumer = cast(FastConsumer, super()._new_consumer())
        consumer.handlers.update(self.__dict__.get("_fast_routes", {}))
        consumer.flushes.extend(self.__dict__.get("_fast_flushes", []))
        self.__dict__["_fast_routes"] = consumer.handlers  # later routes land there too
        self.__dict__["_fast_flushes"] = consumer.flushes
        return consumer


class _MessageAsEvent:
    """Enough of a Faust Event for code that asks `current_event()` (the RocksDB store picks
    a table partition's database from it); calling it stands in for Faust's weak reference."""

    __slots__ = ("message",)

    def __init__(self, message: Any) -> None:
        self.message = message

    def __call__(self) -> _MessageAsEvent:
        return self


def make_current(message: Any) -> None:
    """Make message the current event of the calling task, as a stream would."""
    faust_streams._current_event.set(cast(Any, _MessageAsEvent(message)))
