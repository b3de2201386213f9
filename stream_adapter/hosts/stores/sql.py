"""The SQL approval store (SQLAlchemy 2 async): PostgreSQL via asyncpg, SQLite via aiosqlite.

For hosts whose containers die between invocations. Every transition is an UPDATE guarded by
the expected state and the record's runs count; the database lets exactly one concurrent UPDATE
match, so one caller in any process wins a claim. Needs the ``sql`` extra.
"""

from __future__ import annotations

import asyncio
import builtins
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    JSON,
    Column,
    Index,
    MetaData,
    String,
    Table,
    Text,
    cast,
    delete,
    event,
    func,
    insert,
    select,
    type_coerce,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from stream_adapter.core.approvals import ApprovalRecord, ApprovalState
from stream_adapter.core.runners import LoopLocal
from stream_adapter.hosts.stores._cas import CompareAndSetStore
from stream_adapter.hosts.stores._common import missing, unavailable_on
from stream_adapter.hosts.stores._lifetimes import FROM_SETTINGS, Lifetime, lifetimes

__all__ = ["SQLApprovalStore"]

_UNAVAILABLE = (SQLAlchemyError, OSError)


@dataclass
class _Conn:
    """One loop's engine, and whether the table is known to exist."""

    engine: AsyncEngine
    ready: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class SQLApprovalStore(CompareAndSetStore):
    """Approval records in one table of a SQL database, given by a SQLAlchemy async URL.

    ``postgresql+asyncpg://user@host/db`` or ``sqlite+aiosqlite:///path.db``. The table is
    created on first use. An engine is built lazily per event loop (a LoopLocal), since async
    drivers' connections belong to the loop that opened them. On SQLite every transaction is
    ``BEGIN IMMEDIATE`` in WAL mode, so writers of several processes queue instead of failing.
    Settled rows are deleted once settled_retention_s is over, and pending ones expire after
    pending_expiry_s (defaults: the settings), on access and by `sweep`.
    """

    def __init__(
        self,
        url: str,
        *,
        table: str = "stream_adapter_approvals",
        settled_retention_s: Lifetime = FROM_SETTINGS,
        pending_expiry_s: Lifetime = FROM_SETTINGS,
        **engine_options: Any,
    ) -> None:
        self.url = url
        self.lifetimes = lifetimes(settled_retention_s, pending_expiry_s)
        self._backend = make_url(url).get_backend_name()
        self._metadata = MetaData()
        self._table = Table(
            table,
            self._metadata,
            Column("approval_id", String(300), primary_key=True),
            Column("state", String(16), nullable=False),
            Column("requested_at", String(64), nullable=False),
            Column("record", Text, nullable=False),
            Index(f"ix_{table}_state_requested", "state", "requested_at"),
        )
        self._options = engine_options
        self._conns: LoopLocal[_Conn] = LoopLocal(self._connect)

    def _connect(self) -> _Conn:
        options = dict(self._options)
        if self._backend == "sqlite":
            options.setdefault("connect_args", {}).setdefault("timeout", 30.0)
        engine = create_async_engine(self.url, **options)
        if self._backend == "sqlite":
            _immediate_transactions(engine)
        return _Conn(engine)

    async def _engine(self) -> AsyncEngine:
        conn = self._conns.get()
        if not conn.ready:
            async with conn.lock:
                if not conn.ready:
                    await self._create_table(conn.engine)
                    conn.ready = True
        return conn.engine

    async def _create_table(self, engine: AsyncEngine, attempts: int = 3) -> None:
        """CREATE TABLE if missing; another process creating it at the same time is fine."""
        with unavailable_on(*_UNAVAILABLE):
            for attempt in range(1, attempts + 1):
                try:
                    async with engine.begin() as db:
                        await db.run_sync(self._metadata.create_all, checkfirst=True)
                    return
                except DBAPIError:
                    # PostgreSQL: a concurrent CREATE TABLE loses with a unique violation;
                    # the next attempt finds the other's table committed and does nothing.
                    if attempt == attempts:
                        raise

    def _insert_ignoring_duplicates(self, record: ApprovalRecord) -> Any:
        values = {
            "approval_id": record.approval_id,
            "state": record.state.value,
            "requested_at": record.requested_at,
            "record": record.to_bytes().decode(),
        }
        if self._backend == "postgresql":
            return postgresql.insert(self._table).values(values).on_conflict_do_nothing()
        if self._backend == "sqlite":
            return sqlite.insert(self._table).values(values).on_conflict_do_nothing()
        return insert(self._table).values(values)

    async def _select(self, db: AsyncConnection, approval_id: str) -> ApprovalRecord | None:
        row = (
            await db.execute(
                select(self._table.c.record).where(self._table.c.approval_id == approval_id)
            )
        ).first()
        return None if row is None else ApprovalRecord.from_bytes(row[0])

    async def _insert(self, record: ApprovalRecord) -> ApprovalRecord:
        engine = await self._engine()
        with unavailable_on(*_UNAVAILABLE):
            try:
                async with engine.begin() as db:
                    await db.execute(self._insert_ignoring_duplicates(record))
            except IntegrityError:
                pass  # a database without ON CONFLICT: the record is already there
            async with engine.connect() as db:
                stored = await self._select(db, record.approval_id)
        if stored is None:  # deleted past its retention between the two statements
            raise missing(record.approval_id)
        return stored

    async def _load(self, approval_id: str) -> ApprovalRecord | None:
        engine = await self._engine()
        with unavailable_on(*_UNAVAILABLE):
            async with engine.connect() as db:
                return await self._select(db, approval_id)

    def _runs(self) -> Any:
        """The stored record's runs count, read from its JSON (0 when absent)."""
        column = self._table.c.record
        document: Any
        if self._backend == "postgresql":
            document = cast(column, postgresql.JSONB)
        else:  # SQLite and others read JSON from text as is
            document = type_coerce(column, JSON)
        return func.coalesce(document["runs"].as_integer(), 0)

    async def _swap(self, record: ApprovalRecord, expected: ApprovalRecord) -> bool:
        engine = await self._engine()
        table = self._table
        statement = (
            update(table)
            .where(
                table.c.approval_id == record.approval_id,
                table.c.state == expected.state.value,
                self._runs() == expected.runs,
            )
            .values(state=record.state.value, record=record.to_bytes().decode())
        )
        with unavailable_on(*_UNAVAILABLE):
            async with engine.begin() as db:
                result = await db.execute(statement)
        return result.rowcount == 1

    async def _delete(self, record: ApprovalRecord) -> bool:
        engine = await self._engine()
        table = self._table
        statement = delete(table).where(
            table.c.approval_id == record.approval_id, table.c.state == record.state.value
        )
        with unavailable_on(*_UNAVAILABLE):
            async with engine.begin() as db:
                result = await db.execute(statement)
        return result.rowcount == 1

    async def _scan_due(
        self, state: ApprovalState, before: str, limit: int
    ) -> builtins.list[ApprovalRecord]:
        engine = await self._engine()
        table = self._table
        query = (
            select(table.c.record)
            .where(table.c.state == state.value, table.c.requested_at < before)
            .order_by(table.c.requested_at)
            .limit(limit)
        )
        with unavailable_on(*_UNAVAILABLE):
            async with engine.connect() as db:
                rows = (await db.execute(query)).all()
        return [ApprovalRecord.from_bytes(row[0]) for row in rows]

    async def _scan(self, state: ApprovalState | None) -> builtins.list[ApprovalRecord]:
        engine = await self._engine()
        table = self._table
        query = select(table.c.record).order_by(table.c.requested_at, table.c.approval_id)
        if state is not None:
            query = query.where(table.c.state == state.value)
        with unavailable_on(*_UNAVAILABLE):
            async with engine.connect() as db:
                rows = (await db.execute(query)).all()
        return [ApprovalRecord.from_bytes(row[0]) for row in rows]

    async def aclose(self) -> None:
        """Dispose of the running loop's engine (a new one is built on next use)."""
        conn = self._conns.pop()
        if conn is not None:
            await conn.engine.dispose()


def _immediate_transactions(engine: AsyncEngine) -> None:
    """SQLite: WAL, and BEGIN IMMEDIATE so a read-then-write never fails on a busy upgrade."""

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # the driver emits no BEGIN of its own
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")
