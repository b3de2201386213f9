"""Every approval store removes settled records after their retention and expires pending ones.

A redelivered call within the retention still answers `already_done` from its record; past it,
the record is gone from the backend itself (read with the backend's own client, not the store):
Redis removes it by its EXPIRE, the SQL stores and DynamoDB by the store's sweep or on access.
A pending approval past PENDING_EXPIRY_S answers its agent ApprovalExpired, and a late decision
is refused with 409. Real Redis, PostgreSQL and SQLite; DynamoDB is moto's emulator.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from stream_adapter import (
    ApprovalExpired,
    ApprovalNotFound,
    MemoryApprovalStore,
    SQLiteApprovalStore,
    handle_envelope,
    record_decision,
)
from stream_adapter.core.approvals import ApprovalState, ApprovalStore
from tests.harness import wait_for
from topologies.demo import build_executor

KINDS = ["memory", "sqlite", "redis", "sql-postgres", "sql-sqlite", "dynamodb"]
RETENTION_S = 8.0
"""Short, and still long enough for a redelivery right after the settling call."""
DEADLINE_S = 30.0
PENDING_EXPIRY_S = 4.0
"""Longer than a park takes against an emulator on a busy machine."""


def _invoice(call_id: str) -> dict[str, Any]:
    return {
        "tool": "send_invoice",
        "arguments": {"customer": "acme", "amount_cents": 1250},
        "run_id": "run-retention",
        "call_id": call_id,
    }


Gone = Callable[[str], Awaitable[bool]]
"""Whether the backend itself no longer holds an approval id (read with its own client)."""


@pytest.fixture
def request_services(kind: str, request: pytest.FixtureRequest) -> pytest.FixtureRequest:
    """request, with the services kind needs started (outside the test's event loop)."""
    needs = {
        "redis": ("redis_server", "redis_namespace"),
        "sql-postgres": ("postgres_url",),
        "dynamodb": ("dynamodb_server",),
    }
    for name in needs.get(kind, ()):
        request.getfixturevalue(name)
    return request


async def make_store(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, **lifetimes: Any
) -> tuple[ApprovalStore, Gone]:
    """A fresh store of kind with the given lifetimes, and its backend's `gone` check."""
    if kind == "memory":
        memory = MemoryApprovalStore(**lifetimes)

        async def memory_gone(approval_id: str) -> bool:
            await memory.sweep()
            return approval_id not in memory._records

        return memory, memory_gone
    if kind == "sqlite":
        path = tmp_path / "approvals.sqlite"
        sqlite_store = SQLiteApprovalStore(path, **lifetimes)
        return sqlite_store, _sqlite_gone(sqlite_store, path)
    if kind == "redis":
        from redis.asyncio import Redis

        from stream_adapter import RedisApprovalStore

        url = request.getfixturevalue("redis_server")
        namespace = request.getfixturevalue("redis_namespace")
        redis_store = RedisApprovalStore(url, namespace=namespace, **lifetimes)

        async def redis_gone(approval_id: str) -> bool:
            client = Redis.from_url(url)
            try:  # no sweep and no access: Redis's own EXPIRE removes it
                return await client.exists(f"{{{namespace}}}:approval:{approval_id}") == 0
            finally:
                await client.aclose()

        return redis_store, redis_gone
    if kind == "dynamodb":
        return await _dynamodb(request, **lifetimes)
    from stream_adapter import SQLApprovalStore

    if kind == "sql-postgres":
        url = str(request.getfixturevalue("postgres_url"))
    else:
        url = f"sqlite+aiosqlite:///{tmp_path / 'approvals.db'}"
    sql = SQLApprovalStore(url, **lifetimes)

    async def sql_gone(approval_id: str) -> bool:
        await sql.sweep()  # what a park runs every APPROVALS_SWEEP_INTERVAL_S
        from sqlalchemy import text
        from sqlalchemy.ext.asyncio import create_async_engine

        engine = create_async_engine(url)
        try:
            async with engine.connect() as db:
                rows = await db.execute(
                    text("SELECT count(*) FROM stream_adapter_approvals WHERE approval_id = :a"),
                    {"a": approval_id},
                )
                return rows.scalar_one() == 0
        finally:
            await engine.dispose()

    return sql, sql_gone


def _sqlite_gone(store: SQLiteApprovalStore, path: Path) -> Gone:
    async def gone(approval_id: str) -> bool:
        await store.sweep()
        with sqlite3.connect(path) as db:  # another connection, as another process would
            row = db.execute(
                "SELECT count(*) FROM approvals WHERE approval_id = ?", (approval_id,)
            ).fetchone()
        return bool(row[0] == 0)

    return gone


async def _dynamodb(request: pytest.FixtureRequest, **lifetimes: Any) -> tuple[ApprovalStore, Gone]:
    from aiobotocore.session import get_session

    from stream_adapter import DynamoDBApprovalStore

    endpoint = request.getfixturevalue("dynamodb_server")
    table = f"t{uuid.uuid4().hex[:16]}"
    store = DynamoDBApprovalStore(
        table, region_name="eu-west-1", endpoint_url=endpoint, **lifetimes
    )

    async def gone(approval_id: str) -> bool:
        await store.sweep()  # DynamoDB's TTL removes it in time; the sweep does it sooner
        async with get_session().create_client(
            "dynamodb", region_name="eu-west-1", endpoint_url=endpoint
        ) as client:
            answer = await client.get_item(
                TableName=table, Key={"approval_id": {"S": approval_id}}, ConsistentRead=True
            )
        return "Item" not in answer

    return store, gone


@pytest.fixture
async def closing() -> AsyncIterator[list[ApprovalStore]]:
    stores: list[ApprovalStore] = []
    yield stores
    for store in stores:
        close = getattr(store, "aclose", None)
        if close is not None:
            await close()
        elif isinstance(store, SQLiteApprovalStore):
            store.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_a_settled_record_is_removed_after_its_retention(
    kind: str,
    request_services: pytest.FixtureRequest,
    tmp_path: Path,
    closing: list[ApprovalStore],
) -> None:
    store, gone = await make_store(
        kind, request_services, tmp_path, settled_retention_s=RETENTION_S
    )
    closing.append(store)
    executor = build_executor(store)
    done_call, denied_call, waiting_call = (
        _invoice("c-done"),
        _invoice("c-denied"),
        _invoice("c-wait"),
    )
    parked = [
        await handle_envelope(executor, call, message_id=f"m-{n}", source="sqs")
        for n, call in enumerate((done_call, denied_call, waiting_call))
    ]
    done_id, denied_id, waiting_id = (reply["approval_id"] for reply in parked)
    assert (await record_decision(executor, done_id, reviewer="ann", approved=True))[0] == 200
    assert (await record_decision(executor, denied_id, reviewer="ann", approved=False))[0] == 200
    resume = {"approval_id": done_id}
    first = await handle_envelope(executor, resume, message_id="m-resume", source="sqs")
    assert first["status"] == "ok"

    # Within the retention: a redelivered resume and a redelivered call answer from the record.
    again = await handle_envelope(executor, resume, message_id="m-resume", source="sqs")
    assert again["status"] == "already_done" and again["outcome"] == first
    redelivered = await handle_envelope(executor, done_call, message_id="m-0", source="sqs")
    assert redelivered["status"] == "already_done"
    assert not await gone(done_id) and not await gone(denied_id)

    # Past it: both settled records leave the backend; the pending one stays.
    await wait_for(
        lambda: _all_gone(gone, done_id, denied_id),
        timeout_s=DEADLINE_S,
        what="the settled records removed from the backend",
    )
    assert await store.get(done_id) is None and await store.get(denied_id) is None
    with pytest.raises(ApprovalNotFound):
        await handle_envelope(executor, resume, message_id="m-resume", source="sqs")
    waiting = await store.get(waiting_id)
    assert waiting is not None and waiting.state is ApprovalState.PENDING
    assert not await gone(waiting_id)
    assert [r.approval_id for r in await store.list()] == [waiting_id]


async def _all_gone(gone: Gone, *approval_ids: str) -> bool:
    return all([await gone(approval_id) for approval_id in approval_ids])


@pytest.mark.parametrize("kind", KINDS)
async def test_a_pending_approval_nobody_decides_expires(
    kind: str,
    request_services: pytest.FixtureRequest,
    tmp_path: Path,
    closing: list[ApprovalStore],
) -> None:
    store, _ = await make_store(kind, request_services, tmp_path, pending_expiry_s=PENDING_EXPIRY_S)
    closing.append(store)
    executor = build_executor(store)
    call = _invoice("c-expiring")
    parked = await handle_envelope(executor, call, message_id="m-1", source="sqs")
    assert parked["status"] == "pending_approval"
    approval_id = parked["approval_id"]
    resume = {"approval_id": approval_id}

    async def expired() -> ApprovalExpired | None:
        try:
            await handle_envelope(executor, resume, message_id="m-2", source="sqs")
        except ApprovalExpired as exc:
            return exc
        return None

    error = await wait_for(expired, timeout_s=DEADLINE_S, what="the approval to expire")
    assert error.status == 410 and not error.retryable and error.approval_id == approval_id
    record = await store.get(approval_id)
    assert record is not None and record.state is ApprovalState.EXPIRED
    assert record.reply is not None and record.reply["error"]["kind"] == "ApprovalExpired"
    # A late decision is refused, the record stays expired and the call never runs.
    status, body = await record_decision(executor, approval_id, reviewer="ann", approved=True)
    assert status == 409 and body["kind"] == "ApprovalConflict"
    with pytest.raises(ApprovalExpired):  # the redelivered call gets the same answer
        await handle_envelope(executor, call, message_id="m-1", source="sqs")
    assert [r.state for r in await store.list()] == [ApprovalState.EXPIRED]
    assert await store.list(ApprovalState.PENDING) == []


@pytest.mark.parametrize("kind", ["sqlite", "sql-sqlite", "redis"])
async def test_pending_approvals_never_expire_by_default(
    kind: str,
    request_services: pytest.FixtureRequest,
    tmp_path: Path,
    closing: list[ApprovalStore],
) -> None:
    store, gone = await make_store(kind, request_services, tmp_path, settled_retention_s=0.001)
    closing.append(store)
    assert store.lifetimes.pending_expiry_s is None  # type: ignore[attr-defined]
    executor = build_executor(store)
    parked = await handle_envelope(executor, _invoice("c-kept"), message_id="m", source="sqs")
    assert await store.sweep() == 0  # type: ignore[attr-defined]
    record = await store.get(parked["approval_id"])
    assert record is not None and record.state is ApprovalState.PENDING
    assert not await gone(parked["approval_id"])


@pytest.mark.parametrize("kind", ["dynamodb"])
async def test_a_settled_dynamodb_item_carries_its_ttl(
    kind: str,
    request_services: pytest.FixtureRequest,
    tmp_path: Path,
    closing: list[ApprovalStore],
) -> None:
    from aiobotocore.session import get_session

    store, _ = await make_store(kind, request_services, tmp_path, settled_retention_s=3600.0)
    closing.append(store)
    executor = build_executor(store)
    parked = await handle_envelope(executor, _invoice("c-ttl"), message_id="m", source="sqs")
    approval_id = parked["approval_id"]
    assert (await record_decision(executor, approval_id, reviewer="ann", approved=False))[0] == 200
    record = await store.get(approval_id)
    assert record is not None and record.settled_at is not None
    settled = datetime.fromisoformat(record.settled_at.replace("Z", "+00:00")).timestamp()
    async with get_session().create_client(
        "dynamodb",
        region_name="eu-west-1",
        endpoint_url=store.endpoint_url,  # type: ignore[attr-defined]
    ) as client:
        table = store.table  # type: ignore[attr-defined]
        ttl = await client.describe_time_to_live(TableName=table)
        item = await client.get_item(TableName=table, Key={"approval_id": {"S": approval_id}})
    spec = ttl["TimeToLiveDescription"]
    assert (spec["TimeToLiveStatus"], spec["AttributeName"]) == ("ENABLED", "expires_at")
    assert abs(int(item["Item"]["expires_at"]["N"]) - (settled + 3600)) <= 2
