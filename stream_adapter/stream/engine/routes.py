"""A route: each record of its topics becomes a job, acked once the job has finished.

Jobs run on a KeyedScheduler (in offset order per Kafka key, concurrently across keys, at most
`max_queued` queued), and the consumer commits the end of the run of acked offsets at each
partition's head (commits/offsets.py), so a commit never passes an unfinished job (contract §8,
§9). A route may have a lane: a faster path offered each record first, which finishes some
records itself (it acks them, or hands them back through `redo`).

Exactly once, a lane's outputs go into the transactions of their input partitions, like the
jobs'. The rule of commits/gate.py holds across both paths: a partition's record goes to the
lane only while no earlier record of that partition is a job still short of its outputs, a
job's outputs wait for the lane's earlier records of its partition (`Lane.settled`), and a
commit pauses the lane (`Lane.paused`: nothing sent, nothing in flight) while it takes the
acked offsets and commits. A record the lane cannot finish fails its transaction instead of
being redone: the group rejoins and the partition restarts from its commit.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol, cast

from stream_adapter.core import logs
from stream_adapter.stream.engine.app import App, make_current
from stream_adapter.stream.engine.claims import OwnershipLost
from stream_adapter.stream.engine.commits.gate import OutputSection, current_section
from stream_adapter.stream.engine.commits.transactions import transactional_id
from stream_adapter.stream.engine.keyed import KeyedScheduler
from stream_adapter.stream.engine.producer import BatchSender
from stream_adapter.stream.engine.records import Delivery, current_delivery, delivery_of

JOB_RETRY_CAP_S = 30.0
"""Longest wait between two tries of a job that failed for a reason not its message's."""

Process = Callable[[Delivery], Awaitable[None]]
"""A job's work: bring one delivery to its terminal, durable outcome."""
Redo = Callable[[Any, BaseException | None], None]


class Lane(Protocol):
    """A route's faster path, offered each record before it is scheduled as a job."""

    def offer(self, message: Any, key: Hashable) -> Process | None:
        """None when the lane took the record (it acks it, or redoes it); else the job's work."""

    def holds(self, key: Hashable) -> bool:
        """True while an output of key waits in the lane (it goes before key's next job)."""

    async def flush(self, *, wait: bool = True) -> None:
        """Send what the lane holds; wait=False at the end of a fetch round."""

    async def drain(self) -> None:
        """Send what the lane holds and wait until every record it took is acked or redone."""

    def settled(self, topic: str, partition: int) -> asyncio.Future[None] | None:
        """Exactly once: resolved when every record of the partition the lane took so far is
        acked or failed; None when it holds none."""

    def paused(self) -> AbstractAsyncContextManager[None]:
        """Exactly once: within it, nothing the lane took is in flight and nothing is sent."""


@dataclass(frozen=True, slots=True)
class LaneLinks:
    """What a lane is given: a sender for its batches, the consumer's ack for the records it
    took, and the route's `redo` for records whose outputs never became durable."""

    sender: BatchSender
    ack: Callable[[list[Any]], None]
    redo: Redo


LaneFactory = Callable[[LaneLinks], Awaitable[Lane]]
"""Builds a route's lane on the worker's loop, at the route's first record."""


def order_key(message: Any) -> Hashable:
    """Messages with the same key run in offset order; keyless ones need no order."""
    if message.key is None:
        return (message.topic, message.partition, message.offset)
    return (message.topic, message.partition, message.key)


class JobRoute:
    """The handler of a route (`App.route`): schedules each record as a job of `process`."""

    def __init__(
        self, app: App, process: Process, *, max_queued: int, lane: LaneFactory | None = None
    ) -> None:
        self._app = app
        self._process = process
        self._max_queued = max_queued
        self._lane_factory = lane
        self._lane: Lane | None = None
        self._scheduler: KeyedScheduler | None = None  # built on first use, on the worker's loop
        self._last_section: dict[tuple[str, int], OutputSection] = {}  # exactly once
        self._redos: set[asyncio.Task[None]] = set()  # held, so none is collected while it waits

    def subscribe(self, topic: Any) -> None:
        """Route topic's records here (with the lane's flush, drain and pause when there is
        one)."""
        if self._lane_factory is None:
            self._app.route(topic, self)
        else:
            self._app.route(topic, self, self.flush, self.drain, self.paused)

    def __call__(self, message: Any) -> Awaitable[None] | None:
        """None when the lane finished with message on the spot (nothing awaited, so nothing
        else ran meanwhile); else what schedules it as a job, to be awaited."""
        scheduler = self._scheduler
        if scheduler is None:
            scheduler = self._scheduler = KeyedScheduler(self._max_queued, _on_job_error)
        key = order_key(message)
        work = self._process
        lane = self._lane
        if lane is None:
            if self._lane_factory is not None:
                return self._with_new_lane(message)
        else:
            if not scheduler.busy(key) and (
                self._app.commit_gate is None or self._partition_clear(message)
            ):
                offered = lane.offer(message, key)
                if offered is None:
                    return None
                work = offered
            if lane.holds(key):
                return self._after_flush(lane, message, key, work)
        return self._schedule(message, delivery_of(message), key, work)

    async def _with_new_lane(self, message: Any) -> None:
        """The route's first record: build the lane on the worker's loop, then hand it on."""
        await self._build_lane()
        pending = self(message)
        if pending is not None:
            await pending

    async def _after_flush(self, lane: Lane, message: Any, key: Hashable, work: Process) -> None:
        await lane.flush()  # the key's earlier outputs go first (contract §9)
        await self._schedule(message, delivery_of(message), key, work)

    async def _build_lane(self) -> Lane:
        assert self._lane_factory is not None
        app = self._app
        links = LaneLinks(BatchSender(app), app.fast_consumer.ack_all, self.redo)
        self._lane = await self._lane_factory(links)
        return self._lane

    def _partition_clear(self, message: Any) -> bool:
        """Exactly once: no earlier record of message's partition is a job short of its
        outputs."""
        last = self._last_section.get((message.topic, message.partition))
        return last is None or last.done.done()

    @asynccontextmanager
    async def paused(self) -> AsyncIterator[None]:
        """The lane paused, while a commit takes the acked offsets (exactly once)."""
        if self._lane is None:
            yield
            return
        async with self._lane.paused():
            yield

    async def flush(self) -> None:
        """The end of a fetch round: the lane sends what can go without waiting."""
        if self._lane is not None:
            await self._lane.flush(wait=False)

    async def drain(self) -> None:
        if self._lane is not None:
            await self._lane.drain()

    def redo(self, message: Any, exc: BaseException | None) -> None:
        """Schedule a record the lane took but could not finish (exc: why; None: cancelled).

        Exactly once, its output may be in its partition's transaction: that transaction
        fails instead, and the record comes again from the committed offset."""
        guard = self._app.transaction_guard
        if guard is not None:
            tid = transactional_id(self._app, message.topic, message.partition)
            guard.fail(tid, exc if exc is not None else "cancelled")
            return
        delivery = delivery_of(message)
        _job_failed(exc, delivery.message_id, 1)
        task = asyncio.ensure_future(
            self._schedule(message, delivery, order_key(message), self._process)
        )
        self._redos.add(task)
        task.add_done_callback(self._redos.discard)

    async def _schedule(
        self, message: Any, delivery: Delivery, key: Hashable, work: Process
    ) -> None:
        app = self._app
        app.fast_consumer.track(message)
        section = None
        if app.commit_gate is not None:
            tp = (delivery.topic, delivery.partition)
            previous = self._last_section.get(tp)
            waits = [] if previous is None else [previous.done]
            in_lane = None if self._lane is None else self._lane.settled(*tp)
            if in_lane is not None:
                waits.append(in_lane)
            after: asyncio.Future[None] | None = None
            if len(waits) == 1:
                after = waits[0]
            elif waits:
                after = cast("asyncio.Future[None]", asyncio.gather(*waits))
            section = OutputSection(app.commit_gate, after)
            self._last_section[tp] = section

        async def job() -> None:
            current_delivery.set(delivery)  # this job's own task context
            make_current(message)
            current_section.set(section)
            try:
                await _until_done(app, delivery, message, work)
            finally:
                if section is not None:
                    section.close()

        assert self._scheduler is not None
        await self._scheduler.submit(key, job)


async def _until_done(app: App, delivery: Delivery, message: Any, process: Process) -> None:
    """Process, then ack; a job that fails for a reason not the message's is tried again.

    Bad messages never raise (the flows answer them); an exception here is the broker or a
    bug. Left unacked, the message would hold its partition's commits until a restart and
    stall the next rebalance, which waits for unacked messages. So: retry with backoff, the
    same as a redelivery would (approved calls still run at most once); when the partition
    is being revoked or the worker stops, hand the message back unacked (the next owner gets
    it from the committed offset). Exactly once, a failure fails the partition's transaction
    instead (commits/transactions.py): the group rejoins and the message is handed back.
    """
    failures = 0
    guard = app.transaction_guard
    while True:
        try:
            await process(delivery)
        except OwnershipLost as exc:
            _hand_back(app, delivery, message, exc)
            return
        except Exception as exc:
            failures += 1
            if guard is not None:
                # Its outputs may be in the partition's transaction: redo it from the commit.
                guard.fail(transactional_id(app, delivery.topic, delivery.partition), exc)
            _job_failed(exc, delivery.message_id, failures)
            logs.log.debug("job failure", exc_info=exc)
            # Exactly once, wait for the rebalance the failure asked for to hand it back.
            backoff_s = min(JOB_RETRY_CAP_S, 0.5 * 2 ** (failures - 1))
            delay_s = JOB_RETRY_CAP_S if guard is not None else backoff_s
            deadline = asyncio.get_running_loop().time() + delay_s
            while asyncio.get_running_loop().time() < deadline:
                if app.should_stop or not getattr(app.consumer, "flow_active", True):
                    app.consumer.unacked.discard(message)  # handed back, never acked
                    return
                await asyncio.sleep(min(0.2, delay_s))
            continue
        app.consumer.ack(message)
        return


def _hand_back(app: App, delivery: Delivery, message: Any, exc: OwnershipLost) -> None:
    """A job whose partition is not this worker's now: its message stays unacked, so no
    commit passes it, and the group rebalances (if it is not already), so the partition's
    owner reads it again from the committed offset. Exactly once, what it put in its
    partition's transaction is aborted with it."""
    guard = app.transaction_guard
    if guard is not None:
        guard.fail(transactional_id(app, delivery.topic, delivery.partition), exc)
    app.consumer.unacked.discard(message)
    request_rejoin = getattr(app.consumer, "request_rejoin", None)
    if request_rejoin is not None:
        request_rejoin()


def _on_job_error(exc: BaseException) -> None:
    logs.event(logs.ERROR, "job crashed", error_kind=type(exc).__name__)
    logs.log.debug("job crash", exc_info=exc)


def _job_failed(exc: BaseException | None, message_id: str, attempt: int) -> None:
    """A job failed for a reason not its message's (None: its send was cancelled) and
    goes again."""
    logs.event(
        logs.ERROR,
        "job failed; retrying",
        error_kind=type(exc).__name__ if exc is not None else "Cancelled",
        message_id=message_id,
        attempt=attempt,
    )
