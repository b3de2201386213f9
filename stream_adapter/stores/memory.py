"""The in-memory approval store: one process, lost on exit (tests, single workers)."""

from __future__ import annotations

import builtins
import threading
from datetime import datetime

from stream_adapter.approvals import (
    ApprovalRecord,
    ApprovalState,
    Decision,
    Resolution,
    Step,
    apply_decision,
    apply_resolution,
    begin_run,
    expire,
    expiry_due,
    finish,
    give_up,
    next_step,
    rerun,
    retention_due,
)
from stream_adapter.replies import Reply
from stream_adapter.stores._common import conflict, missing
from stream_adapter.stores._lifetimes import FROM_SETTINGS, Lifetime, lifetimes

__all__ = ["MemoryApprovalStore"]


class MemoryApprovalStore:
    """Records in a dict behind a lock: one process, lost on exit (tests, single workers).

    Settled records are removed after settled_retention_s and pending ones expire after
    pending_expiry_s (defaults: the settings), on access and by `sweep`.
    """

    def __init__(
        self,
        *,
        settled_retention_s: Lifetime = FROM_SETTINGS,
        pending_expiry_s: Lifetime = FROM_SETTINGS,
    ) -> None:
        self._records: dict[str, ApprovalRecord] = {}
        self._lock = threading.Lock()
        self.lifetimes = lifetimes(settled_retention_s, pending_expiry_s)

    def _aged(self, approval_id: str, now: datetime | None = None) -> ApprovalRecord | None:
        """The record as it reads now (lock held): removed past its retention, expired past
        its expiry."""
        record = self._records.get(approval_id)
        if record is None:
            return None
        if retention_due(record, self.lifetimes.settled_retention_s, now):
            del self._records[approval_id]
            return None
        if expiry_due(record, self.lifetimes.pending_expiry_s, now):
            record = self._records[approval_id] = expire(record)
        return record

    def _get(self, approval_id: str) -> ApprovalRecord:
        record = self._aged(approval_id)
        if record is None:
            raise missing(approval_id)
        return record

    async def park(self, record: ApprovalRecord) -> ApprovalRecord:
        """Insert record unless its approval_id exists; return the stored one."""
        with self._lock:
            self._aged(record.approval_id)
            return self._records.setdefault(record.approval_id, record)

    async def get(self, approval_id: str) -> ApprovalRecord | None:
        """The record, or None."""
        with self._lock:
            return self._aged(approval_id)

    async def sweep(self, now: datetime | None = None) -> int:
        """Remove settled records past their retention and expire pending ones past their
        expiry; how many records it changed."""
        with self._lock:
            before = dict(self._records)
            for approval_id in before:
                self._aged(approval_id, now)
            return sum(1 for k, v in before.items() if self._records.get(k) is not v)

    async def decide(self, approval_id: str, decision: Decision) -> ApprovalRecord:
        """Apply the first decision; ApprovalNotFound, or ApprovalConflict once decided."""
        with self._lock:
            record, changed = apply_decision(self._get(approval_id), decision)
            if not changed:
                raise conflict(record)
            self._records[approval_id] = record
            return record

    async def claim(self, approval_id: str) -> tuple[ApprovalRecord, bool]:
        """approved → running for exactly one caller; others get the current record."""
        with self._lock:
            record = self._get(approval_id)
            if record.state is not ApprovalState.APPROVED:
                return record, False
            record = self._records[approval_id] = begin_run(record)
            return record, True

    async def finish(self, approval_id: str, reply: Reply) -> ApprovalRecord:
        """running → done with the terminal reply."""
        with self._lock:
            record = self._records[approval_id] = finish(self._get(approval_id), reply)
            return record

    async def reclaim(
        self, approval_id: str, *, rerun_after_s: float = 0.0
    ) -> tuple[ApprovalRecord, bool]:
        """running → running with one more run, for idempotent tools; others get the record."""
        with self._lock:
            record = self._get(approval_id)
            if next_step(record, idempotent=True, rerun_after_s=rerun_after_s) is not Step.RERUN:
                return record, False
            record = self._records[approval_id] = rerun(record)
            return record, True

    async def give_up(
        self, approval_id: str, *, idempotent: bool, rerun_after_s: float
    ) -> tuple[ApprovalRecord, bool]:
        """running → unknown when its run is surely over and may not run again."""
        with self._lock:
            record = self._get(approval_id)
            step = next_step(record, idempotent=idempotent, rerun_after_s=rerun_after_s)
            if step is not Step.GIVE_UP:
                return record, False
            record = self._records[approval_id] = give_up(record)
            return record, True

    async def resolve(self, approval_id: str, resolution: Resolution) -> ApprovalRecord:
        """unknown → done or approved by a person's resolution; ApprovalConflict otherwise."""
        with self._lock:
            record = self._records[approval_id] = apply_resolution(
                self._get(approval_id), resolution
            )
            return record

    async def list(self, state: ApprovalState | None = None) -> builtins.list[ApprovalRecord]:
        """Records, optionally only those in state, oldest first."""
        with self._lock:
            for approval_id in list(self._records):
                self._aged(approval_id)
            records = [r for r in self._records.values() if state is None or r.state == state]
        return sorted(records, key=lambda r: r.requested_at)
