"""The consumer: Faust's fetching, offset bookkeeping, acks and commits, with a direct route.

Faust hands each fetched record to its conductor through `wait_first`, which starts four
asyncio tasks per record, then builds an Event, queues it and lets a Stream pull it out
again. `FastConsumer` keeps Faust's fetching, offset-gap bookkeeping, acks and commits, and
hands records of routed topics straight to a handler (engine/routes.py): tracked as unacked,
so rebalances and shutdown wait for them (`stream_wait_empty`), acked through the consumer
when done. Topics with no route (a user's own agents) go through Faust's conductor as usual.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import Any, ClassVar

from aiokafka.errors import IllegalStateError
from aiokafka.structs import TopicPartition
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP
from faust.types.tuples import ack_lock
from mode import Service
from mode.utils.futures import notify

from stream_adapter.core import logs
from stream_adapter.stream.engine.commits.gate import CommitGate
from stream_adapter.stream.engine.heartbeats import last_heartbeat
from stream_adapter.stream.engine.loop_consumer import LoopConsumerThread
from stream_adapter.stream.engine.producer import IdempotentProducer
from stream_adapter.stream.engine.restore import BulkRestore
from stream_adapter.stream.engine.stuck import StuckPartitions

ROUND_SLICE_S = 0.05
"""Longest a round holds the event loop without yielding: the consumer's heartbeats and
fetches run in the same loop (loop_consumer.py), and a tool that never awaits may be slow."""

ROUND_GAP_S = 0.005
"""Shortest time from the start of one fetch round to the start of the next. Paced, a round
that follows at once carries a record or two a partition, and each round costs a fetch and a
produce request; waiting lets a round carry what arrived meanwhile, for less CPU per call and
a lower tail (docs/bench.md, "Rounds, not calls"). On a backlog a round lasts longer than this
and nothing waits."""

COMMIT_GAP_S = 0.05
"""Shortest pause between two commits, so the replies held during a commit are sent and the
jobs waiting at the commit gate enter before the next commit pauses them again. Exactly
once at 10,000 calls/s, back-to-back commits (a 10 ms gap) raised p99 against the whole
interval; half the interval lowered it at every rate measured (docs/bench.md)."""

Handler = Callable[[Any], Awaitable[None] | None]
"""Takes a record: None when done with it on the spot (nothing awaited); else an awaitable
that finishes handing it on (a job scheduled, say)."""
Flush = Callable[[], Awaitable[None]]
Drain = Callable[[], Awaitable[None]]
Pause = Callable[[], AbstractAsyncContextManager[None]]


def round_gap_left(began_s: float, now_s: float) -> float:
    """How long the next fetch round waits: what is left of ROUND_GAP_S since the previous
    round began (0 once it has passed)."""
    return max(0.0, began_s + ROUND_GAP_S - now_s)


class StreamHold:
    """Stream partitions resumed between an assignment and the recovery's seek to the
    committed offsets, held back until that seek is done.

    Faust's recovery resumes them, then starts the seek as a task: a fetch round that began
    in between handed on records the seek then moved back before, and they were handled
    twice (one of two gaps found behind an exactly-once chaos run that committed 256 calls'
    replies twice; the other is engine/stable_offsets.py). Changelog partitions resume at
    once: recovery reads them before it seeks.

    Only a seek begun after the partitions were held releases them. A seek back to the
    committed offsets after a fetch that returned while the flow was stopped can begin
    during a rebalance and end after the next assignment; releasing then let stream records
    be handled before the recovery's own seek moved them back (docs/chaos.md).
    """

    def __init__(self) -> None:
        self._pending = False
        self._held: set[Any] = set()
        self._assignment = 0  # counts assignments: a seek's ticket names the one it began in
        self._sought = False  # a seek begun after partitions were held has ended

    def assigned(self) -> None:
        """Partitions were assigned: a seek to the committed offsets is to come."""
        self._assignment += 1
        self._pending = True
        self._held.clear()
        self._sought = False

    def resumable(self, tps: Iterable[Any], changelog_topics: Collection[str]) -> set[Any]:
        """Those of tps to resume now; the others are held until a seek begun after this."""
        tpset = set(tps)
        if not self._pending:
            return tpset
        streams = {tp for tp in tpset if tp.topic not in changelog_topics}
        self._held |= streams
        return tpset - streams

    def seek_begins(self) -> int | None:
        """A seek to the committed offsets begins: its ticket if its end may release the
        held partitions (they were held before it began), else None."""
        return self._assignment if self._pending and self._held else None

    def seek_ended(self, ticket: int | None) -> None:
        """The seek with this ticket succeeded."""
        if ticket is not None and ticket == self._assignment:
            self._sought = True

    def release(self, assignment: Collection[Any]) -> set[Any]:
        """No seek is running: the held partitions still assigned, to resume now, once a seek
        begun after they were held has ended (else none)."""
        if not (self._pending and self._sought):
            return set()
        self._pending = False
        held, self._held = self._held, set()
        return {tp for tp in held if tp in assignment}


class FastConsumer(faust_aiokafka.Consumer):
    """Faust's aiokafka consumer with a direct route for registered topics."""

    handlers: dict[str, Handler]
    flushes: list[Flush]
    """Called after each fetched round of records (routes that batch their outputs)."""
    drains: list[Drain]
    """Awaited before Faust waits for unacked messages: records a route holds untracked."""
    pauses: list[Pause]
    """Entered around each commit, exactly once: routes that send their outputs in batches
    hold them while the commit takes the acked offsets."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.handlers = {}
        self.flushes = []
        self.drains = []
        self.pauses = []
        self._seeks = 0  # seeks begun or ended: a fetch that spans one is not handed on
        self._expected: dict[Any, int] = {}  # the offset a partition's next record should have
        self._seeking = asyncio.Event()  # set while no seek runs
        self._seeking.set()
        self._seeks_running = 0
        self.stuck = StuckPartitions()
        """Partitions set aside because their next batch cannot be fetched or decoded."""
        self.restore: BulkRestore | None = None
        """Where table changelog records go in bulk (engine/restore.py); None: Faust's path."""
        self._held = StreamHold()
        self._revoked: set[Any] = set()
        """Partitions revoked and not assigned here again: their acks are not recorded."""

    def _new_consumer_thread(self) -> LoopConsumerThread:
        return LoopConsumerThread(self, loop=self.loop, beacon=self.beacon)

    def track(self, message: Any) -> None:
        """Count message as unacked, so rebalances and shutdown wait for it (Faust's
        track_message minus its per-record monitor call, several µs of no use here)."""
        self._unacked_messages.add(message)

    def ack(self, message: Any) -> bool:
        """Faust's ack, except for a message of a partition revoked from this worker: Faust
        has forgotten that partition's committed offset by then, so its acked offsets would
        commit past records still unhandled (or handed back), or move another owner's
        commit. Such a message is done here; whoever owns its partition reads it again."""
        if message.tp in self._revoked:
            message.acked = True
            self._unacked_messages.discard(message)
            return False
        return bool(super().ack(message))

    def ack_all(self, messages: list[Any]) -> None:
        """Faust's ack for many untracked messages of one topic, under one lock."""
        if not messages or not self.app.topics.acks_enabled_for(messages[0].topic):
            return
        with ack_lock:
            acked_count = 0
            last_tp: Any = None
            committed, acked_index, acked = None, set(), []
            revoked = self._revoked
            for message in messages:
                if message.acked:
                    continue
                message.acked = True
                tp, offset = message.tp, message.offset
                if revoked and tp in revoked:
                    continue
                if tp is not last_tp:  # a batch's messages come in runs of one partition
                    last_tp = tp
                    committed = self._committed_offset[tp]
                    acked_index, acked = self._acked_index[tp], self._acked[tp]
                if (committed is None or offset >= committed) and offset not in acked_index:
                    acked_index.add(offset)
                    acked.append(offset)
                    acked_count += 1
            self._n_acked += acked_count
            notify(self._waiting_for_ack)

    async def wait_empty(self) -> None:
        """Wait for the routes' untracked records, then for Faust's unacked messages."""
        for drain in self.drains:
            await drain()
        await super().wait_empty()

    async def _drain_messages(self, fetcher: Any) -> None:
        """Fetch and dispatch records until the consumer or the fetcher stops."""
        loop = asyncio.get_running_loop()
        round_began = loop.time() - ROUND_GAP_S
        try:
            while not (self.should_stop or fetcher.should_stop):
                # Always yield: a fetch may return at once, over and over.
                await asyncio.sleep(round_gap_left(round_began, loop.time()))
                round_began = loop.time()
                seeks = self._seeks
                records, active = await self._wait_next_records(1.0)
                if not records and self.restore is not None:
                    self.restore.settle(self._position)  # every fetched record is handed on
                if records is None or self.should_stop:
                    continue
                if seeks != self._seeks or not self._seeking.is_set():
                    await self._fetch_after_seek(records)
                    continue
                if not self.flow_active:
                    await self._refetch({tp: rs[0].offset for tp, rs in records.items() if rs})
                    await self._seek_back()
                    continue
                await self._dispatch(records, active)
                for flush in self.flushes:
                    await flush()
        except self.consumer_stopped_errors:
            if not self.transport.app.should_stop:
                raise
        except asyncio.CancelledError:
            if not self.transport.app.should_stop:
                raise

    async def _dispatch(self, records: Mapping[Any, list[Any]], active: set[Any] | None) -> None:
        """Hand one fetch's records on, partition by partition, until the flow stops.

        Faust's getmany does the same, but interleaves partitions record by record and asks
        the consumer for each record's highwater: per record, a fifth of a fast call.
        Records it leaves (a partition paused or revoked meanwhile, the flow stopped) are
        fetched again (`_refetch`).
        """
        read_offset = self._read_offset
        handlers = self.handlers
        slow = self.callback
        to_message = self._to_message
        app = self.app
        generation_id = app.consumer_generation_id
        buffered = self._buffered_partitions
        expected = self._expected
        clock = time.perf_counter
        yield_at = clock() + ROUND_SLICE_S
        pending = list(records.items())
        for index, (tp, batch) in enumerate(pending):
            if active is not None and tp not in active and tp not in buffered:
                await self._refetch({tp: batch[0].offset})
                continue
            app.monitor.track_tp_end_offset(tp, self.highwater(tp))
            if (
                self.restore is not None
                and not self.should_stop
                and self.flow_active
                and app.consumer_generation_id == generation_id
                and self.restore.apply(tp, batch, self._position(tp))
            ):
                read_offset[tp] = batch[-1].offset
                expected[tp] = batch[-1].offset + 1
                if clock() >= yield_at:
                    await self._end_slice()
                    yield_at = clock() + ROUND_SLICE_S
                continue
            waited = True  # another task may have run: check the flow before the next record
            handler = handlers.get(tp.topic)
            for record in batch:
                if waited and (
                    self.should_stop
                    or not self.flow_active
                    or app.consumer_generation_id != generation_id
                ):
                    left = {tp: record.offset}
                    left.update((later, rest[0].offset) for later, rest in pending[index + 1 :])
                    await self._refetch(left)
                    return
                message = to_message(tp, record)
                offset = message.offset
                last = read_offset[tp]
                if last is not None and offset < last:
                    continue  # seen before a seek; Faust drops these too
                skipped_from = expected.get(tp)
                if skipped_from is not None and offset > skipped_from:
                    self._never_delivered(tp, skipped_from, offset)
                expected[tp] = offset + 1
                if handler is None:
                    await self.wait_first(slow(message), self.suspend_flow.wait())
                    waited = True
                else:
                    pending_job = handler(message)  # it tracks what it does not ack at once
                    waited = pending_job is not None
                    if pending_job is not None:
                        await pending_job
                read_offset[tp] = offset
                if clock() >= yield_at:
                    await self._end_slice()
                    yield_at = clock() + ROUND_SLICE_S
                    waited = True

    async def _end_slice(self) -> None:
        """A slice of a long round is done: the routes send what they batched so far (as at
        the end of a round), then other tasks run. A round of a backlog's first fetch can
        hold tens of thousands of records; their replies go out as they are made, not all
        after the last of them."""
        for flush in self.flushes:
            await flush()
        await asyncio.sleep(0)

    def _never_delivered(self, tp: Any, begin: int, end: int) -> None:
        """Offsets begin..end-1 of tp will never be delivered (transaction markers, compacted
        records): count them as done, so they do not hold the committed offset back.

        Faust's `_add_gap` counts the record that revealed the gap as done too (its interval
        ends one past it), so a commit could pass that record while it still ran; here the
        interval is exact (docs/faust-patches.md).
        """
        if not self.app.topics.acks_enabled_for(tp.topic):
            return
        committed = self._committed_offset[tp]
        if committed is not None:
            begin = max(begin, committed)
        if begin < end:
            gaps = self._gap[tp]
            gaps.addi(begin, end)
            gaps.merge_overlaps()

    async def seek(self, partition: Any, offset: int) -> None:
        """Faust's seek; the partition's next record is expected at offset."""
        await super().seek(partition, offset)
        self._expected[partition] = offset

    async def seek_to_committed(self) -> Mapping[Any, int]:
        """Faust's seek to the committed offsets; the next records are expected there (where
        there is a commit: the consumer moves only then)."""
        committed = await super().seek_to_committed()
        for tp, offset in committed.items():
            if offset is not None and offset > 0:
                self._expected[tp] = offset
            else:
                self._expected.pop(tp, None)
        return committed

    async def _refetch(self, offsets: Mapping[Any, int]) -> None:
        """Seek partitions back to records fetched but not handed on, so they come again.

        The consumer's position is already past them, and Faust's seek to the committed
        offsets after a rebalance moves it back only where there is a commit: in a partition
        never committed (decisions for a killed worker's approvals, say) they were lost
        until a restart. A partition no longer assigned needs nothing: its next owner
        starts from its commit, or from the beginning.
        """
        assigned = self.assignment()
        for tp, offset in offsets.items():
            if tp not in assigned:
                continue
            try:
                await self.seek(tp, offset)
            except IllegalStateError:
                continue  # revoked meanwhile
            logs.event(
                logs.INFO, "records to be fetched again", topic=tp.topic, partition=tp.partition
            )

    async def perform_seek(self) -> None:
        """Faust's seek to the committed offsets; what a fetch returns meanwhile waits. The
        stream partitions held back since the assignment resume once a seek begun after
        they were held is done and no other seek is running."""
        ticket = self._held.seek_begins()
        self._seeks += 1
        self._seeks_running += 1
        self._seeking.clear()
        try:
            await super().perform_seek()
            self._held.seek_ended(ticket)
        finally:
            self._seeks += 1
            self._seeks_running -= 1
            if not self._seeks_running:
                self._seeking.set()
                released = self._held.release(self.assignment())
                if released:
                    logs.event(logs.INFO, "stream partitions resumed", partitions=len(released))
                super().resume_partitions(released)

    async def on_partitions_assigned(self, assigned: set[TP], generation_id: int = 0) -> None:
        """Faust's; stream partitions then wait for the recovery's seek (`resume_partitions`)."""
        self._revoked.difference_update(assigned)
        self._held.assigned()
        app: Any = self.app
        app.assignments = getattr(app, "assignments", 0) + 1  # a topic may be new since
        for hook in getattr(app, "assignment_hooks", ()):
            try:
                await hook()
            except Exception as exc:  # a hook only prepares; the flows cope without it
                logs.event(logs.WARNING, "assignment hook failed", error_kind=type(exc).__name__)
        await super().on_partitions_assigned(assigned, generation_id)

    def resume_partitions(self, tps: Any) -> None:
        """Faust's, except that after an assignment the stream partitions wait for the seek
        to the committed offsets (`StreamHold`)."""
        super().resume_partitions(self._held.resumable(tps, self.app.tables.changelog_topics))

    async def _fetch_after_seek(self, records: Mapping[Any, list[Any]]) -> None:
        """Records fetched while a seek ran: from before it or after it, no telling. Faust
        sets the read offsets only once the seek is done, so handed on they could pass the
        `offset < last` check a second time, and be processed twice. Fetch them again from
        where the seek left each partition (its read offset), or from the first of them."""
        await self._seeking.wait()
        again: dict[Any, int] = {}
        for tp, batch in records.items():
            if batch:
                read = self._read_offset[tp]
                again[tp] = batch[0].offset if read is None else read
        await self._refetch(again)

    async def _seek_back(self) -> None:
        """Fetched while the flow was stopped: go back to the committed offsets (as Faust)."""
        logs.event(logs.INFO, "seeking back to the committed offsets: fetched while stopped")
        try:
            await self.perform_seek()
        except Exception as exc:
            self.log.warning("exception performing seek when flow not active %r", exc)

    @Service.task
    async def _commit_handler(self) -> None:
        """Commit every `commit_interval`, counted from the start of the previous commit.

        Faust sleeps the whole interval after each commit ends, so every cycle lasted the
        interval plus the commit; exactly once, a reply becomes visible only at the end of
        the commit after it, and a commit takes several round trips to the broker."""
        interval = self.commit_interval
        await self.sleep(interval)
        clock = time.monotonic
        while not self.should_stop:
            started = clock()
            await self.commit()
            await self.sleep(max(COMMIT_GAP_S, interval - (clock() - started)))

    async def commit(self, *args: Any, **kwargs: Any) -> bool:
        """Faust's commit, held while a job is between its first transactional send and its
        ack, with the routes' batched outputs paused (exactly-once mode; see
        commits/gate.py)."""
        gate: CommitGate | None = getattr(self.app, "commit_gate", None)
        if gate is None:
            return bool(await super().commit(*args, **kwargs))
        async with gate.exclusive(), AsyncExitStack() as paused:
            for pause in self.pauses:
                await paused.enter_async_context(pause())
            return bool(await super().commit(*args, **kwargs))

    async def on_partitions_revoked(self, revoked: set[TP]) -> None:
        """Exactly once: finish the running jobs and commit their offsets first. Then no
        ack of the revoked partitions counts until they are assigned here again.

        Faust forgets the acked offsets of revoked partitions and only then waits for the
        running jobs and commits: their replies would be committed without their offsets,
        and answered again by the next owner (commits/transactions.py). At least once, a job
        acked while Faust waits would commit with no committed offset to hold it back, past
        an earlier record not yet handled; its message is read again instead.
        """
        eos = getattr(self.app, "commit_gate", None) is not None
        if eos and not self.app.should_stop and self.assignment():
            self.stop_flow()
            await self.wait_empty()
        if not self.app.should_stop:  # stopping, the in-flight jobs end and commit first
            self._revoked.update(revoked)
        await super().on_partitions_revoked(revoked)
        for tp in revoked:
            self._expected.pop(tp, None)
        self.stuck.forget(revoked)

    def lags(self, topics: frozenset[str]) -> list[tuple[str, int, int]]:
        """(topic, partition, messages after the committed offset) of each assigned partition
        of topics whose highwater is known."""
        out: list[tuple[str, int, int]] = []
        for tp in sorted(self.assignment()):
            if tp.topic not in topics:
                continue
            end = self.highwater(tp)
            if end is None:
                continue
            committed = self._committed_offset.get(tp)
            out.append((tp.topic, tp.partition, max(0, end - (committed or 0))))
        return out

    async def verify_all_partitions_active(self) -> None:
        """Faust's stall detector, off: it judges partitions by its streams' progress, which
        routed topics and recovered changelogs never show, so it reported a healthy idle
        worker every 1.25 s. engine/stalls.py checks the routed partitions instead."""

    def partition_work(self, topics: frozenset[str]) -> list[tuple[Any, int | None, bool]]:
        """(tp, committed offset, has work) of each assigned partition of topics.

        Work: records fetched and not yet handed on (position below the highwater), or
        handed on and not yet committed (the next expected record past the committed offset).
        Faust's read offset cannot tell the second: a seek sets it to the offset sought, so
        after a seek back to the committed offset an idle partition looked busy forever.
        """
        consumer = getattr(self._thread, "_consumer", None)
        assignment = getattr(getattr(consumer, "_subscription", None), "subscription", None)
        states = getattr(assignment, "assignment", None)
        out: list[tuple[Any, int | None, bool]] = []
        for tp in sorted(self.assignment()):
            if tp.topic not in topics:
                continue
            committed = self._committed_offset.get(tp)
            expected = self._expected.get(tp)  # one past the last handed on, or a seek's offset
            handed_on = expected is not None and expected > (committed or 0)
            fetched = False
            if states is not None:
                state = states.state_value(TopicPartition(tp.topic, tp.partition))
                high = self.highwater(tp)
                if state is not None and state.has_valid_position and high is not None:
                    fetched = state.position < high
            out.append((tp, committed, handed_on or fetched))
        return out

    def _position(self, tp: Any) -> int | None:
        """The aiokafka consumer's next offset to fetch of tp (None when unknown)."""
        consumer = getattr(self._thread, "_consumer", None)
        assignment = getattr(getattr(consumer, "_subscription", None), "subscription", None)
        states = getattr(assignment, "assignment", None)
        if states is None:
            return None
        state = states.state_value(TopicPartition(tp.topic, tp.partition))
        if state is None or not state.has_valid_position:
            return None
        return int(state.position)

    def heartbeat_at(self) -> float | None:
        """The monotonic time of the group coordinator's last good answer to a heartbeat
        (engine/heartbeats.py), None before the first."""
        consumer = getattr(self._thread, "_consumer", None)
        coordinator = getattr(consumer, "_coordinator", None)
        return None if coordinator is None else last_heartbeat(coordinator)

    def request_rejoin(self) -> None:
        """Have the group rebalance, so every partition restarts from its committed offset."""
        consumer = getattr(self._thread, "_consumer", None)
        if consumer is not None:
            consumer._coordinator.request_rejoin()


class FastTransport(faust_aiokafka.Transport):
    """The aiokafka transport, building FastConsumers and idempotent producers."""

    Consumer: ClassVar[type[FastConsumer]] = FastConsumer
    Producer: ClassVar[type[IdempotentProducer]] = IdempotentProducer
