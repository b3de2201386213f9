"""The engine's Faust app: Faust's groups, tables and commits, with direct routes.

`App` is a `faust.App` (users add their own agents, tables and services as with any Faust
app) whose consumer hands the records of routed topics straight to a handler
(engine/routes.py) instead of Faust's agents. Creating one installs the engine's patches of
Faust (engine/patches.py), which check the installed versions first.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any, cast

import faust
from faust import streams as faust_streams

from stream_adapter.stream.engine import patches
from stream_adapter.stream.engine.claims import PartitionClaims
from stream_adapter.stream.engine.commits.gate import CommitGate
from stream_adapter.stream.engine.commits.transactions import TransactionGuard
from stream_adapter.stream.engine.consumer import (
    Drain,
    FastConsumer,
    FastTransport,
    Flush,
    Handler,
    Pause,
)
from stream_adapter.stream.engine.restore import BulkRestore
from stream_adapter.stream.engine.services import Hook, HookService
from stream_adapter.stream.engine.stalls import StallWatch
from stream_adapter.stream.engine.stuck import StuckPartition


class App(faust.App):
    """A Faust app whose consumer can route topics to handlers (`route`)."""

    commit_gate: CommitGate | None = None
    transaction_guard: TransactionGuard | None = None
    assignments: int = 0
    """Partition assignments so far: a topic deleted and created again since the last one
    has another topic id (`Sender.topic_scope`)."""

    def __init__(self, id: str, **options: Any) -> None:
        patches.install()
        super().__init__(id, **options)
        self.assignment_hooks: list[Callable[[], Awaitable[None]]] = []
        """Awaited at each partition assignment, before any record of it is processed (a
        hook's failure is logged and ends nothing)."""
        if cast(Any, self.conf).processing_guarantee.value == "exactly_once":
            # Commits cover a message's outputs and offset, or neither (commits/gate.py).
            self.commit_gate = CommitGate()
            self.transaction_guard = TransactionGuard(lambda: self.fast_consumer.request_rejoin())

    @property
    def exactly_once(self) -> bool:
        return self.commit_gate is not None

    @property
    def fast_consumer(self) -> FastConsumer:
        """The consumer, typed as what `_new_consumer` builds."""
        return cast(FastConsumer, self.consumer)

    def _new_transport(self) -> Any:
        return FastTransport(self.conf.broker_consumer, self)

    def route(
        self,
        topic: Any,
        handler: Handler,
        flush: Flush | None = None,
        drain: Drain | None = None,
        pause: Pause | None = None,
    ) -> None:
        """Subscribe topic (a Faust topic, one or more names) and hand its records to handler,
        which must `track` or ack each. flush runs after each fetched round; drain, before a
        rebalance or shutdown waits for unacked messages, until records it holds are acked;
        pause, around each commit (exactly once), until records it holds unacked are acked
        and none is sent."""
        self.topics.add(topic)
        routes: dict[str, Handler] = self.__dict__.setdefault("_fast_routes", {})
        for name in topic.topics:
            routes[name] = handler
        if flush is not None:
            self.__dict__.setdefault("_fast_flushes", []).append(flush)
        if drain is not None:
            self.__dict__.setdefault("_fast_drains", []).append(drain)
        if pause is not None:
            self.__dict__.setdefault("_fast_pauses", []).append(pause)

    def _new_consumer(self) -> Any:
        consumer = cast(FastConsumer, super()._new_consumer())
        consumer.restore = BulkRestore(self)
        consumer.handlers.update(self.__dict__.get("_fast_routes", {}))
        consumer.flushes.extend(self.__dict__.get("_fast_flushes", []))
        consumer.drains.extend(self.__dict__.get("_fast_drains", []))
        consumer.pauses.extend(self.__dict__.get("_fast_pauses", []))
        self.__dict__["_fast_routes"] = consumer.handlers  # later routes land there too
        self.__dict__["_fast_flushes"] = consumer.flushes
        self.__dict__["_fast_drains"] = consumer.drains
        self.__dict__["_fast_pauses"] = consumer.pauses
        return consumer

    def partition_claims(self, topics: Iterable[str]) -> PartitionClaims:
        """Fenced writers of the partitions of topics (engine/claims.py): each partition is
        claimed when newly assigned, before tables restore and streams read it."""
        claims = PartitionClaims(self, topics)
        self.__dict__.setdefault("_partition_claims", []).append(claims)
        return claims

    async def on_stop(self) -> None:
        """Faust's (the consumer stops first, its in-flight work done), then the claims."""
        await super().on_stop()
        for claims in self.__dict__.get("_partition_claims", []):
            await claims.stop()

    async def _on_partitions_revoked(self, revoked: Any) -> None:
        """Suspend the revoked partitions' claims (no new run until they are assigned again),
        then Faust's (which waits for the jobs in flight)."""
        if not self.should_stop:
            for claims in self.__dict__.get("_partition_claims", []):
                claims.on_revoked(revoked)
        await super()._on_partitions_revoked(revoked)

    async def _on_partitions_assigned(self, assigned: Any, generation_id: int = 0) -> None:
        """Faust's, after claiming the newly assigned partitions (fencing their previous
        owners' writes) and releasing the revoked ones."""
        if not self.should_stop:
            for claims in self.__dict__.get("_partition_claims", []):
                await claims.on_assigned(assigned, generation_id)
        await super()._on_partitions_assigned(assigned, generation_id)

    def add_service(self, start: Hook, stop: Hook) -> None:
        """Run start when the app starts and stop when it stops (Faust's service lifecycle)."""
        self.service(cast(Any, HookService(start, stop)))

    def stuck_partitions(self) -> list[StuckPartition]:
        """Partitions set aside because their next batch cannot be fetched or decoded."""
        consumer = getattr(self, "_consumer", None)  # none before the worker starts
        return list(consumer.stuck) if isinstance(consumer, FastConsumer) else []

    def watch_stalls(self, stall_s: float) -> StallWatch:
        """Report routed partitions with work and no commit progress for stall_s seconds
        (engine/stalls.py), from when the app starts until it stops."""
        watch = StallWatch(
            lambda: self.fast_consumer,
            lambda: frozenset(self.__dict__.get("_fast_routes", {})),
            stall_s,
        )
        self.add_service(watch.start, watch.stop)
        return watch

    def has_work(self, topic: str, partition: int) -> bool:
        """Whether topic's partition, assigned here, has records fetched or to fetch below its
        highwater, or handed on and not yet committed (False when not assigned here)."""
        consumer = getattr(self, "_consumer", None)
        if not isinstance(consumer, FastConsumer):
            return False
        for tp, _, work in consumer.partition_work(frozenset((topic,))):
            if tp.partition == partition:
                return work
        return False

    def lags(self, topics: frozenset[str]) -> list[tuple[str, int, int]]:
        """Per assigned partition of topics: (topic, partition, messages after the commit)."""
        return self.fast_consumer.lags(topics)


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
