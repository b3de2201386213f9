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
- after its event loop stood still for most of the session timeout (a pause: the group has
  likely expelled it), every claim is suspended and the worker asks to rejoin the group;
  the assignment that follows says what it owns.
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

from stream_adapter import logs
from stream_adapter.stream.engine.records import Headers

STOP_TIMEOUT_S = 10.0

STALL_SHARE = 0.5
"""A loop that stood still this share of the session timeout may have been expelled."""

TICK_S = 0.25
"""How often the claims note that the loop still runs."""

STALLED = "loop stalled"
"""Why claims are suspended after a stall: no write at all until the group assigns again."""

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
    check: Any = None
    """Called before each write: raises OwnershipLost when the worker's membership is in doubt."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def write(self, records: Sequence[Write], *, finishing: bool = False) -> list[Any]:
        """Write records in one transaction; their metadata once committed. OwnershipLost
        when the partition changed hands since this claim was made, or, unless finishing
        (the outcome of a run already started), while it is suspended (nothing was written)."""
        if self.check is not None:
            self.check()  # after a stall nothing goes through, not even an outcome
        async with self.lock:
            if self.lost:
                raise OwnershipLost(self.partition, "released")
            if self.suspended and (not finishing or self.suspended == STALLED):
                raise OwnershipLost(self.partition, self.suspended)
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


class PartitionClaims:
    """The claims of the partitions of `topics` (co-partitioned) this worker owns."""

    def __init__(self, app: Any, topics: Iterable[str], name: str = "marks") -> None:
        self._app = app
        self._topics = frozenset(topics)
        self._name = name
        self._claims: dict[int, Claim] = {}
        self._claiming: dict[int, asyncio.Lock] = {}
        self._generation: int | None = None
        self._ticked = time.monotonic()
        self._ticker: asyncio.TimerHandle | None = None
        self.stalls_total = 0
        """Loop stalls long enough to suspend every claim, since the worker started."""

    def _stall_limit_s(self) -> float:
        return STALL_SHARE * float(self._app.conf.broker_session_timeout)

    def _tick(self) -> None:
        """Note that the loop runs (every TICK_S while claims are held)."""
        with contextlib.suppress(OwnershipLost):
            self.check_loop()
        self._ticked = time.monotonic()
        self._ticker = asyncio.get_running_loop().call_later(TICK_S, self._tick)

    def check_loop(self) -> None:
        """Suspend every claim and ask the group to rejoin when the loop stood still past
        the stall limit since its last tick; OwnershipLost for the write that found it."""
        stalled_s = time.monotonic() - self._ticked
        if stalled_s <= self._stall_limit_s() or not self._claims:
            return
        self._ticked = time.monotonic()
        self.stalls_total += 1
        for claim in self._claims.values():
            claim.suspended = STALLED
        logs.event(
            logs.WARNING,
            "event loop stood still; claims suspended until the group assigns again",
            stalled_s=round(stalled_s, 1),
            partitions=sorted(self._claims),
        )
        with contextlib.suppress(Exception):
            self._app.consumer.request_rejoin()
        raise OwnershipLost(min(self._claims), STALLED)

    def on_revoked(self, revoked: Iterable[Any]) -> None:
        """A rebalance takes revoked away until the next assignment: their claims write only
        the outcomes of runs already started (no new run, park or decision meanwhile)."""
        for tp in revoked:
            claim = self._claims.get(tp.partition) if tp.topic in self._topics else None
            if claim is not None and not claim.suspended:  # a stalled loop's stays
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
        self._ticked = time.monotonic()
        if self._ticker is None:
            self._ticker = asyncio.get_running_loop().call_later(TICK_S, self._tick)
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
            claim = Claim(partition, tid, producer, check=self.check_loop)
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
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
        for partition in list(self._claims):
            await self._release(partition)
