"""Approval-store logic over two backend primitives: insert-if-absent and compare-and-set.

States move forward (pending → approved → running → done, or pending → denied; running →
unknown when a run left no outcome), but not every state is entered once: an idempotent tool's
rerun stays running with one more run, and a person's "it did not run" takes an unknown record
back to approved. Every move into a state again counts a run, so "the record is still in state S
after N runs" identifies the record, and every write is guarded by both, the state and the runs
count it was computed from. That makes each transition, the claim above all, atomic across
processes, whatever the backend: two callers never both win the same step, and a caller that
read the record before it came back to a state cannot win it then.
"""

from __future__ import annotations

import builtins
from abc import ABC, abstractmethod

from stream_adapter.core.approvals import (
    ApprovalRecord,
    ApprovalState,
    Decision,
    Resolution,
    Step,
    apply_decision,
    apply_resolution,
    begin_run,
    give_up,
    next_step,
    rerun,
)
from stream_adapter.core.record_limits import check_parkable, finish_within
from stream_adapter.core.replies import Reply
from stream_adapter.hosts.stores._common import conflict, missing
from stream_adapter.hosts.stores._lifetimes import AgingStore

__all__ = ["CompareAndSetStore", "unchanged"]


def unchanged(stored: ApprovalRecord | None, expected: ApprovalRecord) -> bool:
    """Whether stored is still the record expected was read as: same state, same runs count
    (the test a backend's `_swap` makes before it writes)."""
    return stored is not None and stored.state is expected.state and stored.runs == expected.runs


class CompareAndSetStore(AgingStore, ABC):
    """The ApprovalStore protocol for a backend that offers the primitives below (and
    AgingStore's guarded delete and scan, for retention and expiry)."""

    max_record_bytes: int | None = None
    """The largest record the backend stores, when it has a limit: a call whose record
    leaves no room for its later steps is refused at park, and an outcome too large is
    stored as a small RecordTooLarge error (record_limits)."""
    max_record_name: str = ""
    """That limit, as its messages name it."""

    @abstractmethod
    async def _insert(self, record: ApprovalRecord) -> ApprovalRecord:
        """Store record unless its approval_id exists; return the stored record."""

    @abstractmethod
    async def _load(self, approval_id: str) -> ApprovalRecord | None:
        """The stored record, or None."""

    @abstractmethod
    async def _swap(self, record: ApprovalRecord, expected: ApprovalRecord) -> bool:
        """Replace the stored record with record only if it is still in expected's state with
        expected's runs count (the record the new one was computed from)."""

    @abstractmethod
    async def _scan(self, state: ApprovalState | None) -> builtins.list[ApprovalRecord]:
        """Records (only those in state, when given), oldest first."""

    async def _require(self, approval_id: str) -> ApprovalRecord:
        record = await self._current(approval_id)
        if record is None:
            raise missing(approval_id)
        return record

    async def park(self, record: ApprovalRecord) -> ApprovalRecord:
        """Insert record unless its approval_id exists; return the stored one."""
        if self.max_record_bytes is not None:
            check_parkable(record, self.max_record_bytes, where=self.max_record_name)
        await self._maybe_sweep()
        stored = await self._age(await self._insert(record))
        return stored or await self._insert(record)  # the old one was past its retention

    async def get(self, approval_id: str) -> ApprovalRecord | None:
        """The record, or None."""
        return await self._current(approval_id)

    async def decide(self, approval_id: str, decision: Decision) -> ApprovalRecord:
        """Apply the first decision; ApprovalNotFound, or ApprovalConflict once decided."""
        record = await self._require(approval_id)
        decided, changed = apply_decision(record, decision)
        if not changed:
            raise conflict(decided)
        if not await self._swap(decided, record):
            raise conflict(await self._require(approval_id))  # another decision won the race
        return decided

    async def claim(self, approval_id: str) -> tuple[ApprovalRecord, bool]:
        """approved → running for exactly one caller in any process; others get the record."""
        record = await self._require(approval_id)
        if record.state is not ApprovalState.APPROVED:
            return record, False
        running = begin_run(record)
        if await self._swap(running, record):
            return running, True
        return await self._require(approval_id), False

    async def finish(self, approval_id: str, reply: Reply) -> ApprovalRecord:
        """running → done with the terminal reply, whichever run of an idempotent tool ends
        first; ApprovalConflict once it is not running."""
        while True:
            record = await self._require(approval_id)
            done = finish_within(record, reply, self.max_record_bytes)
            if await self._swap(done, record):
                return done
            # Lost to a rerun's start (still running, one more run) or to another end.

    async def reclaim(
        self, approval_id: str, *, rerun_after_s: float = 0.0
    ) -> tuple[ApprovalRecord, bool]:
        """running → running with one more run, for idempotent tools; others get the record.

        Guarded by the runs count too, so of two hosts meeting the same dead run at once, one
        runs it again.
        """
        record = await self._require(approval_id)
        if next_step(record, idempotent=True, rerun_after_s=rerun_after_s) is not Step.RERUN:
            return record, False
        again = rerun(record)
        if await self._swap(again, record):
            return again, True
        return await self._require(approval_id), False

    async def give_up(
        self, approval_id: str, *, idempotent: bool, rerun_after_s: float
    ) -> tuple[ApprovalRecord, bool]:
        """running → unknown when its run is surely over and may not run again; True when
        this caller moved it (others get the record)."""
        record = await self._require(approval_id)
        step = next_step(record, idempotent=idempotent, rerun_after_s=rerun_after_s)
        if step is not Step.GIVE_UP:
            return record, False
        unknown = give_up(record)
        if await self._swap(unknown, record):
            return unknown, True
        return await self._require(approval_id), False

    async def resolve(self, approval_id: str, resolution: Resolution) -> ApprovalRecord:
        """unknown → done or approved by a person's resolution; ApprovalConflict otherwise."""
        record = await self._require(approval_id)
        resolved = apply_resolution(record, resolution)
        if not await self._swap(resolved, record):
            raise conflict(await self._require(approval_id))  # another resolution won the race
        return resolved

    async def list(self, state: ApprovalState | None = None) -> builtins.list[ApprovalRecord]:
        """Records, optionally only those in state, oldest first."""
        records = await self._scan(None if state is None else ApprovalState(state))
        aged = [await self._age(r) for r in records]
        return [r for r in aged if r is not None and (state is None or r.state == state)]
