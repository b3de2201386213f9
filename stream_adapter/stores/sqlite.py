"""The SQLite approval store: a file shared by the processes of one host."""

from __future__ import annotations

import asyncio
import builtins
import sqlite3
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

from stream_adapter import logs
from stream_adapter.approvals import (
    SETTLED_STATES,
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
from stream_adapter.stores._lifetimes import FROM_SETTINGS, SWEEP_LIMIT, Lifetime, iso, lifetimes

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


class SQLiteApprovalStore:
    """Records in a SQLite file: survives restarts, shared by processes on one host.

    Every change is one ``BEGIN IMMEDIATE`` transaction, and the claim's UPDATE is guarded by
    ``WHERE state = 'approved'``, so exactly one caller in any process wins it. WAL mode and a
    busy timeout let readers and writers of several processes wait instead of failing. Settled
    rows are deleted after settled_retention_s and pending ones expire after pending_expiry_s
    (defaults: the settings), on access and by `sweep` (which a park runs every
    APPROVALS_SWEEP_INTERVAL_S).
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
        self._swept_at = float("-inf")
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

    def _load(
        self, db: sqlite3.Connection, approval_id: str, now: datetime | None = None
    ) -> ApprovalRecord | None:
        """The record as it reads now (in a write transaction): deleted past its retention,
        expired past its expiry."""
        record = self._read(db, approval_id)
        if record is None:
            return None
        if retention_due(record, self.lifetimes.settled_retention_s, now):
            db.execute(
                "DELETE FROM approvals WHERE approval_id = ? AND state = ?",
                (approval_id, record.state.value),
            )
            return None
        if expiry_due(record, self.lifetimes.pending_expiry_s, now):
            record = expire(record)
            self._update(db, record, ApprovalState.PENDING)
        return record

    def _require(self, db: sqlite3.Connection, approval_id: str) -> ApprovalRecord:
        record = self._load(db, approval_id)
        if record is None:
            raise missing(approval_id)
        return record

    @staticmethod
    def _update(db: sqlite3.Connection, record: ApprovalRecord, expected: ApprovalState) -> bool:
        cursor = db.execute(
            "UPDATE approvals SET state = ?, record = ? WHERE approval_id = ? AND state = ?",
            (record.state.value, record.to_bytes(), record.approval_id, expected.value),
        )
        return cursor.rowcount == 1

    async def park(self, record: ApprovalRecord) -> ApprovalRecord:
        """Insert record unless its approval_id exists; return the stored one."""

        def op(db: sqlite3.Connection) -> ApprovalRecord:
            self._load(db, record.approval_id)  # one past its retention makes way
            db.execute(
                "INSERT OR IGNORE INTO approvals VALUES (?, ?, ?, ?)",
                (record.approval_id, record.state.value, record.requested_at, record.to_bytes()),
            )
            return self._require(db, record.approval_id)

        if time.monotonic() - self._swept_at >= self.lifetimes.sweep_interval_s:
            await self.sweep()
        return await self._run(op)

    async def get(self, approval_id: str) -> ApprovalRecord | None:
        """The record, or None."""
        return await self._run(lambda db: self._load(db, approval_id))

    async def sweep(self, now: datetime | None = None) -> int:
        """Delete settled rows past their retention and expire pending ones past their expiry
        (one transaction); how many rows it changed."""
        moment = now or datetime.now(UTC)
        self._swept_at = time.monotonic()
        lifetimes = self.lifetimes
        due: list[tuple[str, str]] = []
        if lifetimes.settled_retention_s is not None:
            before = iso(moment - timedelta(seconds=lifetimes.settled_retention_s))
            due += [(state.value, before) for state in sorted(SETTLED_STATES)]
        if lifetimes.pending_expiry_s is not None:
            before = iso(moment - timedelta(seconds=lifetimes.pending_expiry_s))
            due.append((ApprovalState.PENDING.value, before))

        def op(db: sqlite3.Connection) -> int:
            changed = 0
            for state, before in due:
                rows = db.execute(
                    "SELECT approval_id FROM approvals WHERE state = ? AND requested_at < ?"
                    " ORDER BY requested_at LIMIT ?",
                    (state, before, SWEEP_LIMIT),
                ).fetchall()
                for (approval_id,) in rows:
                    after = self._load(db, approval_id, moment)
                    changed += after is None or after.state.value != state
            return changed

        changed = await self._run(op)
        if changed:
            logs.event(logs.INFO, "approval store swept", records=changed)
        return changed

    async def decide(self, approval_id: str, decision: Decision) -> ApprovalRecord:
        """Apply the first decision; ApprovalNotFound, or ApprovalConflict once decided."""

        def op(db: sqlite3.Connection) -> ApprovalRecord:
            record, changed = apply_decision(self._require(db, approval_id), decision)
            if not changed or not self._update(db, record, ApprovalState.PENDING):
                raise conflict(record)
            return record

        return await self._run(op)

    async def claim(self, approval_id: str) -> tuple[ApprovalRecord, bool]:
        """approved → running for exactly one caller in any process."""

        def op(db: sqlite3.Connection) -> tuple[ApprovalRecord, bool]:
            record = self._require(db, approval_id)
            if record.state is not ApprovalState.APPROVED:
                return record, False
            running = begin_run(record)
            if not self._update(db, running, ApprovalState.APPROVED):
                return self._require(db, approval_id), False
            return running, True

        return await self._run(op)

    async def finish(self, approval_id: str, reply: Reply) -> ApprovalRecord:
        """running → done with the terminal reply."""

        def op(db: sqlite3.Connection) -> ApprovalRecord:
            done = finish(self._require(db, approval_id), reply)
            if not self._update(db, done, ApprovalState.RUNNING):
                raise conflict(self._require(db, approval_id))
            return done

        return await self._run(op)

    async def reclaim(
        self, approval_id: str, *, rerun_after_s: float = 0.0
    ) -> tuple[ApprovalRecord, bool]:
        """running → running with one more run, for idempotent tools; exact (one transaction)."""

        def op(db: sqlite3.Connection) -> tuple[ApprovalRecord, bool]:
            record = self._require(db, approval_id)
            if next_step(record, idempotent=True, rerun_after_s=rerun_after_s) is not Step.RERUN:
                return record, False
            again = rerun(record)
            self._update(db, again, ApprovalState.RUNNING)
            return again, True

        return await self._run(op)

    async def give_up(
        self, approval_id: str, *, idempotent: bool, rerun_after_s: float
    ) -> tuple[ApprovalRecord, bool]:
        """running → unknown when its run is surely over and may not run again (one
        transaction)."""

        def op(db: sqlite3.Connection) -> tuple[ApprovalRecord, bool]:
            record = self._require(db, approval_id)
            step = next_step(record, idempotent=idempotent, rerun_after_s=rerun_after_s)
            if step is not Step.GIVE_UP:
                return record, False
            unknown = give_up(record)
            self._update(db, unknown, ApprovalState.RUNNING)
            return unknown, True

        return await self._run(op)

    async def resolve(self, approval_id: str, resolution: Resolution) -> ApprovalRecord:
        """unknown → done or approved by a person's resolution; ApprovalConflict otherwise."""

        def op(db: sqlite3.Connection) -> ApprovalRecord:
            resolved = apply_resolution(self._require(db, approval_id), resolution)
            self._update(db, resolved, ApprovalState.UNKNOWN)
            return resolved

        return await self._run(op)

    async def list(self, state: ApprovalState | None = None) -> builtins.list[ApprovalRecord]:
        """Records, optionally only those in state, oldest first."""

        def op(db: sqlite3.Connection) -> builtins.list[ApprovalRecord]:
            rows = db.execute("SELECT approval_id FROM approvals ORDER BY requested_at")
            aged = [self._load(db, approval_id) for (approval_id,) in rows.fetchall()]
            return [r for r in aged if r is not None and (state is None or r.state == state)]

        return await self._run(op)

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._db.close()
