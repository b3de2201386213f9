"""Fenced writes of a partition's records: only the worker that owns the partition now.

A worker that pauses past the session timeout (a long stall, a frozen container) loses its
partitions and, when it wakes, carries on: a zombie. Each partition of a claimed topic set
has a transactional producer of its own (transactional id `{app id}-marks-{partition}`),
started when the partition is newly assigned, before Faust restores its tables or its
streams read it: that start (`InitProducerId`) completes or aborts the previous owner's open
transaction and bumps the id's epoch, so every later write of the previous owner's producer
fails with ProducerFenced. A write goes through a `Claim`, each in a transaction of its own;
one that fails because the partition changed hands raises `OwnershipLost`, and its records
are never visible to a read_committed reader (the worker's consumer and table restore read
committed records only, loop_consumer.py).

A worker also stops starting things before it is fenced, in the two moments when it may have
lost a partition without a failed write telling it:
- while a rebalance revokes the partition and until the group assigns it again, a claim is
  suspended: only the outcome of a run already started (`finishing`) is written;
- when the group coordinator has not confirmed its membership for half the session timeout
  (no good heartbeat answer since, nor an assignment: it was paused, or cut off from the
  broker, and may have been expelled), every claim is suspended, outcomes included, and the
  worker asks to rejoin the group; the assignment that follows says what it owns.
A write refused so raises OwnershipLost: the route hands its message back unacked, and the
partition's next owner (this worker again, after the rebalance) reads it anew.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka.errors import (
    InvalidProducerEpoch,
    ProducerFenced,
)
from aiokafka.producer.transaction_manager import TransactionState

from stream_adapter.core import logs
from stream_adapter.stream.engine.records import Headers

STOP_TIMEOUT_S = 10.0

UNCONFIRMED_SHARE = 0.5
"""A worker whose membership went unconfirmed this share of the session timeout may be out."""

UNCONFIRMED = "membership unconfirmed"
"""Why claims are suspended then: no write at all until the group assigns again."""

FENCED = (ProducerFenced, InvalidProducerEpoch)
"""What a producer whose transactional id a newer owner started meets."""


class OwnershipLost(Exception):
    """A write for a partition this worker no longer owns: its records were not written
    (internal to the stream layer; the flow discards what it was writing)."""

    def __init__(self, partition: int, reason: str) -> None:
        super().__init__(f"partition {partition} is no longer owned here ({reason})")
        self.partition = partition
        self.reason = reason


@dataclass(frozen=True)
class Write:
    """One record of a claimed write."""

    topic: str
    key: bytes | None
    value: bytes | None
    partition: int | None = None
    headers: Headers | None = None


@dataclass(eq=False)
class Claim:
    """This worker's ownership of one partition, from one assignment until it is lost."""

    partition: int
    transactional_id: str
    producer: Any
    lost: bool = False
    suspended: str = ""
    """Why only finishing writes go through now ("" when every write does)."""
    membership: PartitionClaims | None = None
    """Whose group membership this claim lasts by: checked before each write and run."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held while a batch of writes commits (a release waits for it)."""
    queued: list[tuple[Sequence[Write], asyncio.Future[list[Any]]]] = field(default_factory=list)
    flusher: asyncio.Future[None] | None = None
    transactions: int = 0
    """Transactions committed through this claim."""

    def ensure_current(self) -> None:
        """Raise OwnershipLost unless new work may start under this claim now: not lost,
        not suspended, the worker's membership confirmed. A check right before a tool's code
        starts, in its thread for a sync tool: no I/O and no side effects (the next write
        suspends the claims)."""
        if self.membership is not None and not self.membership.membership_confirmed():
            raise OwnershipLost(self.partition, UNCONFIRMED)
        if self.lost:
            raise OwnershipLost(self.partition, "released")
        if self.suspended:
            raise OwnershipLost(self.partition, self.suspended)

    async def write(self, records: Sequence[Write], *, finishing: bool = False) -> list[Any]:
        """Write records in a transaction; their metadata once committed. OwnershipLost
        when the partition changed hands since this claim was made, or, unless finishing
        (the outcome of a run already started), while it is suspended (nothing was written).

        Writes that come while a transaction is committing go together in the next one (a
        group commit): back to back, each would wait for the previous one's markers.
        """
        if self.membership is not None:  # unconfirmed, nothing goes through, not even outcomes
            self.membership.check_membership(self.partition)
        if self.lost:
            raise OwnershipLost(self.partition, "released")
        if self.suspended and (not finishing or self.suspended == UNCONFIRMED):
            raise OwnershipLost(self.partition, self.suspended)
        written: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self.queued.append((records, written))
        if self.flusher is None or self.flusher.done():
            self.flusher = asyncio.ensure_future(self._flush())
        return await written

    async def _flush(self) -> None:
        """Commit the queued writes, a transaction per batch, until none is left."""
        async with self.lock:
            while self.queued:
                batch, self.queued = self.queued, []
                try:
                    metadata = await self._commit([r for records, _ in batch for r in records])
                except BaseException as exc:
                    for _, written in batch:
                        if not written.done():
                            written.set_exception(_again(exc))
                    if not isinstance(exc, Exception):
                        raise
                    continue
                first = 0
                for records, written in batch:
                    if not written.done():
                        written.set_result(metadata[first : first + len(records)])
                    first += len(records)

    async def _commit(self, records: Sequence[Write]) -> list[Any]:
        if self.lost:
            raise OwnershipLost(self.partition, "released")
        producer = self.producer
        try:
            await producer.begin_transaction()
            sent = [
                await producer.send(
                    r.topic, r.value, key=r.key, partition=r.partition, headers=r.headers
                )
                for r in records
            ]
            await producer.commit_transaction()
            self.transactions += 1
            return [await future for future in sent]
        except FENCED as exc:
            self.lost = True
            raise OwnershipLost(self.partition, type(exc).__name__) from exc
        except BaseException:
            manager = producer._txn_manager
            if manager.state == TransactionState.FATAL_ERROR:
                self.lost = True
                raise OwnershipLost(self.partition, "producer failed") from None
            if manager.is_in_transaction():
                with contextlib.suppress(Exception):
                    await producer.abort_transaction()
            raise


def _again(exc: BaseException) -> BaseException:
    """What each writer of a failed batch raises: an OwnershipLost of its own (several tasks
    raising one instance would share its traceback), else the exception itself."""
    if isinstance(exc, OwnershipLost):
        return OwnershipLost(exc.partition, exc.reason)
    if isinstance(exc, asyncio.CancelledError):
        return asyncio.CancelledError()
    return exc


class PartitionClaims:
    """The claims of the partitions of `topics` (co-partitioned) this worker owns."""

    def __init__(self, app: Any, topics: Iterable[str], name: str = "marks") -> None:
        self._app = app
        self._topics = frozenset(topics)
        self._name = name
        self._claims: dict[int, Claim] = {}
        self._claiming: dict[int, asyncio.Lock] = {}
        self._generation: int | None = None
        self._confirmed_at = time.monotonic()
        self.suspensions_total = 0
        """Times every claim was suspended for an unconfirmed membership."""

    def _unconfirmed_s(self) -> float:
        """Seconds since the group last confirmed this worker a member (an assignment, or a
        good heartbeat answer)."""
        heartbeat = getattr(self._app.consumer, "heartbeat_at", lambda: None)()
        confirmed = max(self._confirmed_at, heartbeat or 0.0)
        return time.monotonic() - confirmed

    def membership_confirmed(self) -> bool:
        """Whether the group confirmed this worker a member within the limit (no side
        effects: safe from a tool's thread)."""
        limit_s = UNCONFIRMED_SHARE * float(self._app.conf.broker_session_timeout)
        return self._unconfirmed_s() <= limit_s

    def check_membership(self, partition: int) -> None:
        """Before a write of partition: when the membership went unconfirmed past the limit,
        suspend every claim until the next assignment, ask the group to rejoin, and raise
        OwnershipLost."""
        if not self._claims:
            return
        if any(c.suspended == UNCONFIRMED for c in self._claims.values()):
            raise OwnershipLost(partition, UNCONFIRMED)
        unconfirmed_s = self._unconfirmed_s()
        limit_s = UNCONFIRMED_SHARE * float(self._app.conf.broker_session_timeout)
        if unconfirmed_s <= limit_s:
            return
        self.suspensions_total += 1
        for claim in self._claims.values():
            claim.suspended = UNCONFIRMED
        logs.event(
            logs.WARNING,
            "group membership unconfirmed; claims suspended until the group assigns again",
            unconfirmed_s=round(unconfirmed_s, 1),
            partitions=sorted(self._claims),
        )
        with contextlib.suppress(Exception):
            self._app.consumer.request_rejoin()
        raise OwnershipLost(partition, UNCONFIRMED)

    def on_revoked(self, revoked: Iterable[Any]) -> None:
        """A rebalance takes revoked away until the next assignment: their claims write only
        the outcomes of runs already started (no new run, park or decision meanwhile)."""
        for tp in revoked:
            claim = self._claims.get(tp.partition) if tp.topic in self._topics else None
            if claim is not None and not claim.suspended:  # an unconfirmed one's stays
                claim.suspended = "revoked"

    def transactional_id(self, partition: int) -> str:
        return f"{self._app.conf.id}-{self._name}-{partition}"

    def owned(self) -> set[int]:
        """The partitions of the claimed topics in the consumer's assignment."""
        assignment = self._app.consumer.assignment()
        return {tp.partition for tp in assignment if tp.topic in self._topics}

    async def on_assigned(self, assigned: Iterable[Any], generation: int) -> None:
        """Claim the newly assigned partitions (fencing their previous owners) and release
        those no longer assigned. A partition kept from the group's previous generation keeps
        its claim, so a run it started still writes its outcome; after a gap (this worker
        was out of the group, as a paused one is) every partition is claimed afresh, as
        another worker may have owned it meanwhile."""
        mine = {tp.partition for tp in assigned if tp.topic in self._topics}
        continuous = self._generation is not None and generation == self._generation + 1
        self._generation = generation
        for partition in list(self._claims):
            if partition not in mine or not continuous:
                await self._release(partition)
            else:
                self._claims[partition].suspended = ""
        self._confirmed_at = time.monotonic()
        fresh = sorted(p for p in mine if p not in self._claims or self._claims[p].lost)
        outcomes = await asyncio.gather(*(self._claim(p) for p in fresh), return_exceptions=True)
        for partition, outcome in zip(fresh, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                if not isinstance(outcome, Exception):
                    raise outcome
                logs.event(
                    logs.WARNING,
                    "partition not claimed yet; claimed at its first write",
                    partition=partition,
                    error_kind=type(outcome).__name__,
                )

    async def claim(self, partition: int) -> Claim:
        """The current claim of partition, made now if its start failed at the assignment;
        OwnershipLost when the partition is not assigned here."""
        current = self._claims.get(partition)
        if current is not None and not current.lost:
            return current
        if current is not None or partition not in self.owned():
            # A lost claim is never renewed but by a new assignment: a zombie must not
            # fence the partition's owner.
            raise OwnershipLost(partition, "not assigned")
        return await self._claim(partition)

    async def _claim(self, partition: int) -> Claim:
        async with self._claiming.setdefault(partition, asyncio.Lock()):
            current = self._claims.get(partition)
            if current is not None and not current.lost:
                return current
            tid = self.transactional_id(partition)
            producer = self._app.producer._new_producer(transactional_id=tid)
            try:
                await producer.start()  # InitProducerId: the previous owner is fenced
            except BaseException:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(producer.stop(), STOP_TIMEOUT_S)
                raise
            claim = Claim(partition, tid, producer, membership=self)
            self._claims[partition] = claim
            return claim

    async def _release(self, partition: int) -> None:
        claim = self._claims.pop(partition)
        claim.lost = True
        async with claim.lock:  # a write in progress ends first (committed or fenced)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(claim.producer.stop(), STOP_TIMEOUT_S)

    async def stop(self) -> None:
        """Release every claim (the worker stops)."""
        for partition in list(self._claims):
            await self._release(partition)
