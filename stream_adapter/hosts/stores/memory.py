"""The in-memory approval store: one process, lost on exit (tests, single workers)."""

from __future__ import annotations

import builtins
import threading

from stream_adapter.core.approvals import ApprovalRecord, ApprovalState
from stream_adapter.hosts.stores._cas import CompareAndSetStore, unchanged
from stream_adapter.hosts.stores._lifetimes import FROM_SETTINGS, Lifetime, lifetimes

__all__ = ["MemoryApprovalStore"]


class MemoryApprovalStore(CompareAndSetStore):
    """Records in a dict behind a lock: one process, lost on exit (tests, single workers).

    The transitions are CompareAndSetStore's; the lock makes each compare-and-set one step for
    every thread and task. Settled records are removed after settled_retention_s and pending
    ones expire after pending_expiry_s (defaults: the settings), on access and by `sweep`.
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

    async def _insert(self, record: ApprovalRecord) -> ApprovalRecord:
        with self._lock:
            return self._records.setdefault(record.approval_id, record)

    async def _load(self, approval_id: str) -> ApprovalRecord | None:
        with self._lock:
            return self._records.get(approval_id)

    async def _swap(self, record: ApprovalRecord, expected: ApprovalRecord) -> bool:
        with self._lock:
            if not unchanged(self._records.get(record.approval_id), expected):
                return False
            self._records[record.approval_id] = record
            return True

    async def _delete(self, record: ApprovalRecord) -> bool:
        with self._lock:
            stored = self._records.get(record.approval_id)
            if stored is None or stored.state is not record.state:
                return False
            del self._records[record.approval_id]
            return True

    async def _scan_due(
        self, state: ApprovalState, before: str, limit: int
    ) -> builtins.list[ApprovalRecord]:
        due = [r for r in await self._scan(state) if r.requested_at < before]
        return due[:limit]

    async def _scan(self, state: ApprovalState | None) -> builtins.list[ApprovalRecord]:
        with self._lock:
            records = [r for r in self._records.values() if state is None or r.state == state]
        return sorted(records, key=lambda r: r.requested_at)
