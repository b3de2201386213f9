"""The live approvals view: every record of the compacted approvals topic, kept up to date.

A group-less consumer reads every partition from the beginning (read_committed, so aborted
transactional writes never show) and keeps the latest record per approval_id, and when each state
it went through was written (as far as compaction has kept them). Waiters are woken on each
change, which drives the page's live updates and the "decision landed" wait.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import heapq
import time
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition

from stream_adapter.core import logs
from stream_adapter.core.approvals import ApprovalRecord, ApprovalState
from stream_adapter.core.errors import BrokerError, ToolUsageError
from stream_adapter.kafka import clients as kafka_clients
from stream_adapter.review.listing import IdenticalCalls, Twins
from stream_adapter.settings import Settings

DECIDED_STATES = frozenset(
    {
        ApprovalState.APPROVED,
        ApprovalState.DENIED,
        ApprovalState.RUNNING,
        ApprovalState.DONE,
        ApprovalState.UNKNOWN,
        ApprovalState.EXPIRED,
    }
)


ASSIGN_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class Seen:
    """A state of an approval as the topic carried it, and when that record was written."""

    state: ApprovalState
    at: str | None
    """ISO 8601 UTC time of the record's Kafka timestamp (None when the broker gave none)."""


def _iso_ms(timestamp_ms: int | None) -> str | None:
    if timestamp_ms is None or timestamp_ms < 0:
        return None
    moment = datetime.fromtimestamp(timestamp_ms / 1000, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def _assignment(consumer: AIOKafkaConsumer, timeout_s: float) -> list[TopicPartition]:
    """The partitions a group-less consumer got, once its metadata has arrived."""
    deadline = time.monotonic() + timeout_s
    while not consumer.assignment():
        if time.monotonic() > deadline:
            raise BrokerError("no partitions of the approvals topic were assigned")
        await asyncio.sleep(0.05)
    return sorted(consumer.assignment())


def _order(record: ApprovalRecord) -> tuple[str, str]:
    return (record.requested_at, record.approval_id)


class Records(MutableMapping[str, ApprovalRecord]):
    """Records by approval_id, with what every render of the board reads kept up to date as
    they change: each state's records in order (oldest request first, kept sorted one record
    at a time) and the pending ones grouped by identical call. A render then costs the page it
    shows, not the number of pending approvals."""

    def __init__(self) -> None:
        self._records: dict[str, ApprovalRecord] = {}
        self._sorted: dict[ApprovalState, list[ApprovalRecord]] = {s: [] for s in ApprovalState}
        self.identical = IdenticalCalls()

    def __getitem__(self, approval_id: str) -> ApprovalRecord:
        return self._records[approval_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def __setitem__(self, approval_id: str, record: ApprovalRecord) -> None:
        old = self._records.get(approval_id)
        if old is not None:
            self._unsort(old)
        self._records[approval_id] = record
        bisect.insort(self._sorted[record.state], record, key=_order)
        if record.state is ApprovalState.PENDING:
            self.identical.add(record)
        else:
            self.identical.discard(approval_id)

    def __delitem__(self, approval_id: str) -> None:
        old = self._records.pop(approval_id)
        self._unsort(old)
        self.identical.discard(approval_id)

    def _unsort(self, record: ApprovalRecord) -> None:
        ordered = self._sorted[record.state]
        at = bisect.bisect_left(ordered, _order(record), key=_order)
        del ordered[at]  # approval ids are unique, so the record is exactly there

    def in_state(self, state: ApprovalState) -> Sequence[ApprovalRecord]:
        """The records in state, oldest request first (read-only: the view keeps it)."""
        return self._sorted[state]

    def in_states(self, states: frozenset[ApprovalState]) -> Iterator[ApprovalRecord]:
        for state in states:
            yield from self._sorted[state]


class ApprovalsView:
    """Records by approval_id as the approvals topic has them; `version` counts changes."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.records = Records()
        self.seen: dict[str, list[Seen]] = {}
        self.version = 0
        self._changed = asyncio.Event()
        self._caught_up = asyncio.Event()
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None
        self._ends: dict[TopicPartition, int] = {}

    async def start(self) -> None:
        """Connect, assign every partition from the beginning and start following the topic."""
        topic = self.settings.approvals_topic
        consumer = kafka_clients.consumer(
            self.settings,
            topic,
            group_id=None,  # no group: every partition is assigned to this consumer
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            client_id=f"{self.settings.app_id}-review-view",
        )
        await kafka_clients.start(self.settings, consumer)
        try:
            if topic not in await consumer.topics():
                raise BrokerError(f"topic {topic!r} is missing: run `stream-adapter topics create`")
            tps = await _assignment(consumer, ASSIGN_TIMEOUT_S)
            self._ends = {tp: end for tp, end in (await consumer.end_offsets(tps)).items() if end}
        except BrokerError:
            await consumer.stop()
            raise
        except Exception as exc:
            await consumer.stop()
            raise kafka_clients.kafka_error(exc, f"read {topic}") from None
        self._consumer = consumer
        if not self._ends:
            self._caught_up.set()
        self._task = asyncio.create_task(self._follow(), name="approvals-view")

    async def stop(self) -> None:
        """Stop following; the records stay readable."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None

    async def __aenter__(self) -> ApprovalsView:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def wait_caught_up(self, timeout_s: float = 30.0) -> None:
        """Wait until every record written before start() has been read."""
        try:
            await asyncio.wait_for(self._caught_up.wait(), timeout_s)
        except TimeoutError:
            raise BrokerError("the approvals view did not catch up in time") from None

    @property
    def caught_up(self) -> bool:
        return self._caught_up.is_set()

    async def _follow(self) -> None:
        assert self._consumer is not None
        consumer = self._consumer
        while True:
            try:
                batches = await consumer.getmany(timeout_ms=500)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the consumer reconnects by itself; keep following
                logs.event(
                    logs.WARNING, "approvals view: fetch failed", error_kind=type(exc).__name__
                )
                await asyncio.sleep(1.0)
                continue
            changed = False
            for messages in batches.values():
                for message in messages:
                    changed = self._apply(message.key, message.value, message.timestamp) or changed
            if not self._caught_up.is_set():
                await self._check_caught_up(consumer)
            if changed:
                self._notify()

    async def _check_caught_up(self, consumer: AIOKafkaConsumer) -> None:
        for tp, end in self._ends.items():
            if await consumer.position(tp) < end:
                return
        self._caught_up.set()
        self._notify()

    def _apply(
        self, key: bytes | None, value: bytes | None, timestamp_ms: int | None = None
    ) -> bool:
        if key is None:
            return False
        approval_id = key.decode("utf-8", "replace")
        if value is None:  # a tombstone: the record was deleted
            self.seen.pop(approval_id, None)
            return self.records.pop(approval_id, None) is not None
        try:
            record = ApprovalRecord.from_bytes(value)
        except ToolUsageError:
            logs.event(logs.WARNING, "approvals view: unreadable record", approval_id=approval_id)
            return False
        if self.records.get(approval_id) == record:
            return False
        self.records[approval_id] = record
        states = self.seen.setdefault(approval_id, [])
        if not states or states[-1].state is not record.state:
            states.append(Seen(record.state, _iso_ms(timestamp_ms)))
        return True

    def _notify(self) -> None:
        self.version += 1
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_changed(self, since: int, timeout_s: float) -> int:
        """Wait until version passes since (or timeout_s); returns the current version."""
        deadline = time.monotonic() + timeout_s
        while self.version <= since:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)
        return self.version

    async def wait_for(self, predicate: Callable[[ApprovalsView], bool], timeout_s: float) -> bool:
        """Wait until predicate(self) holds; False when timeout_s passed first."""
        deadline = time.monotonic() + timeout_s
        while not predicate(self):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            await self.wait_changed(self.version, remaining)
        return True

    def get(self, approval_id: str) -> ApprovalRecord | None:
        return self.records.get(approval_id)

    def history(self, approval_id: str) -> list[Seen]:
        """The states the view saw the approval in, oldest first, with when each was written."""
        return list(self.seen.get(approval_id, ()))

    def select(self, state: ApprovalState | None = None) -> list[ApprovalRecord]:
        """Records (only those in state, if given), oldest request first."""
        if state is not None:
            return list(self.records.in_state(state))
        return sorted(self.records.values(), key=_order)

    def twins(self, approval_id: str) -> Twins:
        """The pending approvals with the same tool and arguments as approval_id's."""
        return self.records.identical.twins(approval_id)

    def recent_decisions(self, limit: int = 20) -> list[ApprovalRecord]:
        """Decided records, latest decision first."""
        return heapq.nlargest(
            limit,
            self.records.in_states(DECIDED_STATES),
            key=lambda r: (r.decided_at or "", r.approval_id),
        )


def record_json(record: ApprovalRecord) -> dict[str, Any]:
    """The API form of a record."""
    return record.model_dump(mode="json", exclude_none=True)


async def snapshot(settings: Settings, timeout_s: float = 30.0) -> ApprovalsView:
    """A view read up to the topic's current end, then stopped (for the CLI)."""
    view = ApprovalsView(settings)
    await view.start()
    try:
        await view.wait_caught_up(timeout_s)
    finally:
        await view.stop()
    return view
