"""The SQLite approval store: a file shared by the processes of one host."""

from __future__ import annotations

import asyncio
import builtins
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from stream_adapter.core.approvals import ApprovalRecord, ApprovalState
from stream_adapter.hosts.stores._cas import CompareAndSetStore, unchanged
from stream_adapter.hosts.stores._common import missing
from stream_adapter.hosts.stores._lifetimes import FROM_SETTINGS, Lifetime, lifetimes

__all__ = ["SQLiteApprovalStore"]

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS approvals (
    approval_id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    requested_at TEXT NOT NULL,
    record BLOB NOT NULL
)
"""


class SQLiteApprovalStore(CompareAndSetStore):
    """Records in a SQLite file: survives restarts, shared by processes on one host.

    The transitions are CompareAndSetStore's. Its compare-and-set reads the row and updates it
    in one ``BEGIN IMMEDIATE`` transaction, so exactly one caller in any process wins a claim.
    WAL mode and a busy timeout let readers and writers of several processes wait instead of
    failing. Settled rows are deleted after settled_retention_s and pending ones expire after
    pending_expiry_s (defaults: the settings), on access and by `sweep` (which a park runs
    every APPROVALS_SWEEP_INTERVAL_S).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout_s: float = 30.0,
        settled_retention_s: Lifetime = FROM_SETTINGS,
        pending_expiry_s: Lifetime = FROM_SETTINGS,
    ) -> None:
        self.path = str(path)
        self.lifetimes = lifetimes(settled_retention_s, pending_expiry_s)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(
            self.path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
        )
        self._db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute("PRAGMA synchronous = NORMAL")
        self._db.execute(_SCHEMA)

    async def _run(self, fn: Callable[[sqlite3.Connection], T], write: bool = True) -> T:
        return await asyncio.to_thread(self._tx, fn, write)

    def _tx(self, fn: Callable[[sqlite3.Connection], T], write: bool) -> T:
        with self._lock:
            if not write:
                return fn(self._db)
            self._db.execute("BEGIN IMMEDIATE")
            try:
                result = fn(self._db)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            return result

    @staticmethod
    def _read(db: sqlite3.Connection, approval_id: str) -> ApprovalRecord | None:
        row = db.execute(
            "SELECT record FROM approvals WHERE approval_id = ?", (approval_id,)
        ).fetchone()
        return None if row is None else ApprovalRecord.from_bytes(row[0])

    @staticmethod
    def _select(db: sqlite3.Connection, query: str, *args: object) -> builtins.list[ApprovalRecord]:
        return [ApprovalRecord.from_bytes(row[0]) for row in db.execute(query, args)]

    async def _insert(self, record: ApprovalRecord) -> ApprovalRecord:
        def op(db: sqlite3.Connection) -> ApprovalRecord | None:
            db.execute(
                "INSERT OR IGNORE INTO approvals VALUES (?, ?, ?, ?)",
                (record.approval_id, record.state.value, record.requested_at, record.to_bytes()),
            )
            return self._read(db, record.approval_id)

        stored = await self._run(op)
        if stored is None:  # never: the row was inserted or found in that transaction
            raise missing(record.approval_id)
        return stored

    async def _load(self, approval_id: str) -> ApprovalRecord | None:
        return await self._run(lambda db: self._read(db, approval_id), write=False)

    async def _swap(self, record: ApprovalRecord, expected: ApprovalRecord) -> bool:
        def op(db: sqlite3.Connection) -> bool:
            if not unchanged(self._read(db, record.approval_id), expected):
                return False
            db.execute(
                "UPDATE approvals SET state = ?, record = ? WHERE approval_id = ?",
                (record.state.value, record.to_bytes(), record.approval_id),
            )
            return True

        return await self._run(op)

    async def _delete(self, record: ApprovalRecord) -> bool:
        def op(db: sqlite3.Connection) -> bool:
            cursor = db.execute(
                "DELETE FROM approvals WHERE approval_id = ? AND state = ?",
                (record.approval_id, record.state.value),
            )
            return cursor.rowcount == 1

        return await self._run(op)

    async def _scan_due(
        self, state: ApprovalState, before: str, limit: int
    ) -> builtins.list[ApprovalRecord]:
        query = (
            "SELECT record FROM approvals WHERE state = ? AND requested_at < ?"
            " ORDER BY requested_at LIMIT ?"
        )
        args = (state.value, before, limit)
        return await self._run(lambda db: self._select(db, query, *args), write=False)

    async def _scan(self, state: ApprovalState | None) -> builtins.list[ApprovalRecord]:
        query = "SELECT record FROM approvals ORDER BY requested_at"
        args: tuple[str, ...] = ()
        if state is not None:
            query = "SELECT record FROM approvals WHERE state = ? ORDER BY requested_at"
            args = (state.value,)
        return await self._run(lambda db: self._select(db, query, *args), write=False)

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._db.close()
