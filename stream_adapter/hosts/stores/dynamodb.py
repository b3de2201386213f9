"""The DynamoDB approval store (aiobotocore): shared by every function and host in an AWS account.

Every transition is a write with a condition on the stored state and runs count (``#s =
:expected AND #r = :runs``), which DynamoDB evaluates atomically per item, so exactly one
concurrent caller in any process wins a claim. A settled record carries a TTL attribute
(``expires_at``, epoch seconds) that DynamoDB's Time to Live removes it by; until it does, the
store reads it as absent and deletes it. Needs the ``dynamodb`` extra.
"""

from __future__ import annotations

import asyncio
import builtins
from dataclasses import dataclass, field
from typing import Any

from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import BotoCoreError, ClientError

from stream_adapter.core import logs
from stream_adapter.core.approvals import ApprovalRecord, ApprovalState, settled_at
from stream_adapter.core.errors import RecordTooLarge
from stream_adapter.core.runners import LoopLocal
from stream_adapter.hosts.stores._cas import CompareAndSetStore
from stream_adapter.hosts.stores._common import missing, unavailable_on
from stream_adapter.hosts.stores._lifetimes import FROM_SETTINGS, Lifetime, lifetimes

__all__ = [
    "DEFAULT_CONFIG",
    "ITEM_LIMIT_BYTES",
    "STATE_INDEX",
    "TTL_ATTRIBUTE",
    "DynamoDBApprovalStore",
]

ITEM_LIMIT_BYTES = 400 * 1024
"""DynamoDB's item size limit (attribute names and values)."""
_ITEM_NAME = "DynamoDB's 400 KB item limit"

TTL_ATTRIBUTE = "expires_at"
"""The Time to Live attribute: when a settled record's retention is over, in epoch seconds."""

STATE_INDEX = "state-requested_at"
"""The global secondary index ``list(state)`` queries: state, then request time."""

_UNAVAILABLE = (BotoCoreError, ClientError, OSError)
_CHECK_FAILED = "ConditionalCheckFailedException"
_STATE_NAME = {"#s": "state"}  # `state` is a DynamoDB reserved word
_SWAP_NAMES = {"#s": "state", "#r": "runs"}

DEFAULT_CONFIG = AioConfig(
    connect_timeout=5, read_timeout=15, retries={"mode": "standard", "max_attempts": 3}
)
"""Bounded waits: an unreachable DynamoDB fails the message in seconds, and the host retries
it later (botocore's defaults wait about half a minute)."""


@dataclass
class _Conn:
    """One loop's client (opened on first use) and whether the table is known to exist."""

    client: Any = None
    context: Any = None
    ready: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _item(record: ApprovalRecord, retention_s: float | None) -> dict[str, Any]:
    """The item of record; RecordTooLarge, before any request, above ITEM_LIMIT_BYTES."""
    item = {
        "approval_id": {"S": record.approval_id},
        "state": {"S": record.state.value},
        "requested_at": {"S": record.requested_at},
        "runs": {"N": str(record.runs)},
        "record": {"S": record.to_bytes().decode()},
    }
    settled = settled_at(record)
    if settled is not None and retention_s is not None:
        item[TTL_ATTRIBUTE] = {"N": str(int(settled.timestamp() + retention_s) + 1)}
    size = sum(len(name) + len(next(iter(value.values())).encode()) for name, value in item.items())
    if size > ITEM_LIMIT_BYTES:
        raise RecordTooLarge(
            f"approval record larger than {_ITEM_NAME}",
            tool=record.tool,
            approval_id=record.approval_id,
        )
    return item


def _record(item: dict[str, Any]) -> ApprovalRecord:
    return ApprovalRecord.from_bytes(item["record"]["S"])


class DynamoDBApprovalStore(CompareAndSetStore):
    """Approval records in one DynamoDB table, created on first use unless told otherwise.

    The table's key is ``approval_id``; a global secondary index on (``state``,
    ``requested_at``) serves ``list(state)``. Reads of one record are strongly consistent;
    ``list`` reads the index (or scans) and is eventually consistent, as DynamoDB indexes are.
    Credentials and region come from the usual AWS sources (environment, profile, role) or
    from ``client_options`` (given to aiobotocore's ``create_client``; ``config`` replaces
    DEFAULT_CONFIG). A client is opened lazily per event loop (a LoopLocal). A table it creates
    gets Time to Live on ``expires_at``; settled_retention_s and pending_expiry_s default to
    the settings. A call whose record would not leave room below DynamoDB's 400 KB item
    limit for its later steps is refused at park (RecordTooLarge, before it can run), and an
    outcome too large for the item is stored as a small RecordTooLarge error.
    """

    max_record_bytes = ITEM_LIMIT_BYTES - 1024  # the item's other attributes
    max_record_name = _ITEM_NAME

    def __init__(
        self,
        table: str = "stream_adapter_approvals",
        *,
        region_name: str | None = None,
        endpoint_url: str | None = None,
        create_table: bool = True,
        settled_retention_s: Lifetime = FROM_SETTINGS,
        pending_expiry_s: Lifetime = FROM_SETTINGS,
        **client_options: Any,
    ) -> None:
        self.table = table
        self.lifetimes = lifetimes(settled_retention_s, pending_expiry_s)
        self.region_name = region_name
        self.endpoint_url = endpoint_url
        self.create_table = create_table
        self._options = client_options
        self._conns: LoopLocal[_Conn] = LoopLocal(_Conn)

    async def _client(self) -> Any:
        conn = self._conns.get()
        if conn.client is None or not conn.ready:
            async with conn.lock:
                if conn.client is None:
                    options = {"config": DEFAULT_CONFIG, **self._options}
                    context = get_session().create_client(
                        "dynamodb",
                        region_name=self.region_name,
                        endpoint_url=self.endpoint_url,
                        **options,
                    )
                    with unavailable_on(*_UNAVAILABLE):
                        conn.client = await context.__aenter__()
                    conn.context = context
                if not conn.ready:
                    await self._ensure_table(conn.client)
                    conn.ready = True
        return conn.client

    async def _ensure_table(self, client: Any) -> None:
        """Find the table, or create it (another process creating it too is fine)."""
        with unavailable_on(*_UNAVAILABLE):
            try:
                await client.describe_table(TableName=self.table)
                return
            except ClientError as exc:
                if _code(exc) != "ResourceNotFoundException" or not self.create_table:
                    raise
            try:
                await client.create_table(**self._table_definition())
                logs.event(logs.INFO, "approval table created")
            except ClientError as exc:
                if _code(exc) != "ResourceInUseException":  # another process won the race
                    raise
            waiter = client.get_waiter("table_exists")
            await waiter.wait(TableName=self.table, WaiterConfig={"Delay": 1, "MaxAttempts": 60})
            await self._enable_ttl(client)

    async def _enable_ttl(self, client: Any) -> None:
        """Time to Live on TTL_ATTRIBUTE; refused (another process enabled it, or no
        permission), records are still removed on access and by `sweep`."""
        try:
            await client.update_time_to_live(
                TableName=self.table,
                TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE},
            )
        except ClientError as exc:
            logs.event(logs.WARNING, "approval table TTL not enabled", error_kind=_code(exc))

    def _table_definition(self) -> dict[str, Any]:
        return {
            "TableName": self.table,
            "BillingMode": "PAY_PER_REQUEST",
            "AttributeDefinitions": [
                {"AttributeName": "approval_id", "AttributeType": "S"},
                {"AttributeName": "state", "AttributeType": "S"},
                {"AttributeName": "requested_at", "AttributeType": "S"},
            ],
            "KeySchema": [{"AttributeName": "approval_id", "KeyType": "HASH"}],
            "GlobalSecondaryIndexes": [
                {
                    "IndexName": STATE_INDEX,
                    "KeySchema": [
                        {"AttributeName": "state", "KeyType": "HASH"},
                        {"AttributeName": "requested_at", "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "ALL"},
                }
            ],
        }

    async def _insert(self, record: ApprovalRecord) -> ApprovalRecord:
        client = await self._client()
        with unavailable_on(*_UNAVAILABLE):
            try:
                await client.put_item(
                    TableName=self.table,
                    Item=_item(record, self.lifetimes.settled_retention_s),
                    ConditionExpression="attribute_not_exists(approval_id)",
                )
                return record
            except ClientError as exc:
                if _code(exc) != _CHECK_FAILED:
                    _too_large(exc, record)
                    raise
        stored = await self._load(record.approval_id)
        if stored is None:  # deleted past its retention between the two requests
            raise missing(record.approval_id)
        return stored

    async def _load(self, approval_id: str) -> ApprovalRecord | None:
        client = await self._client()
        with unavailable_on(*_UNAVAILABLE):
            answer = await client.get_item(
                TableName=self.table,
                Key={"approval_id": {"S": approval_id}},
                ConsistentRead=True,
            )
        item = answer.get("Item")
        return None if item is None else _record(item)

    async def _swap(self, record: ApprovalRecord, expected: ApprovalRecord) -> bool:
        client = await self._client()
        # An item written before items carried `runs` has run no approved call yet.
        runs = "#r = :runs" if expected.runs else "(#r = :runs OR attribute_not_exists(#r))"
        with unavailable_on(*_UNAVAILABLE):
            try:
                await client.put_item(
                    TableName=self.table,
                    Item=_item(record, self.lifetimes.settled_retention_s),
                    ConditionExpression=f"#s = :expected AND {runs}",
                    ExpressionAttributeNames=_SWAP_NAMES,
                    ExpressionAttributeValues={
                        ":expected": {"S": expected.state.value},
                        ":runs": {"N": str(expected.runs)},
                    },
                )
            except ClientError as exc:
                if _code(exc) == _CHECK_FAILED:
                    return False
                _too_large(exc, record)
                raise
        return True

    async def _delete(self, record: ApprovalRecord) -> bool:
        client = await self._client()
        with unavailable_on(*_UNAVAILABLE):
            try:
                await client.delete_item(
                    TableName=self.table,
                    Key={"approval_id": {"S": record.approval_id}},
                    ConditionExpression="#s = :expected",
                    ExpressionAttributeNames=_STATE_NAME,
                    ExpressionAttributeValues={":expected": {"S": record.state.value}},
                )
            except ClientError as exc:
                if _code(exc) == _CHECK_FAILED:
                    return False
                raise
        return True

    async def _scan_due(
        self, state: ApprovalState, before: str, limit: int
    ) -> builtins.list[ApprovalRecord]:
        client = await self._client()
        items: list[dict[str, Any]] = []
        with unavailable_on(*_UNAVAILABLE):
            pages = client.get_paginator("query").paginate(
                TableName=self.table,
                IndexName=STATE_INDEX,
                KeyConditionExpression="#s = :state AND requested_at < :before",
                ExpressionAttributeNames=_STATE_NAME,
                ExpressionAttributeValues={":state": {"S": state.value}, ":before": {"S": before}},
                PaginationConfig={"MaxItems": limit},
            )
            async for page in pages:
                items.extend(page.get("Items", []))
        return [_record(item) for item in items[:limit]]

    async def _scan(self, state: ApprovalState | None) -> builtins.list[ApprovalRecord]:
        client = await self._client()
        items: list[dict[str, Any]] = []
        with unavailable_on(*_UNAVAILABLE):
            if state is None:
                pages = client.get_paginator("scan").paginate(TableName=self.table)
            else:
                pages = client.get_paginator("query").paginate(
                    TableName=self.table,
                    IndexName=STATE_INDEX,
                    KeyConditionExpression="#s = :state",
                    ExpressionAttributeNames=_STATE_NAME,
                    ExpressionAttributeValues={":state": {"S": state.value}},
                )
            async for page in pages:
                items.extend(page.get("Items", []))
        records = [_record(item) for item in items]
        records.sort(key=lambda r: (r.requested_at, r.approval_id))
        return records

    async def aclose(self) -> None:
        """Close the running loop's client (a new one is opened on next use)."""
        conn = self._conns.pop()
        if conn is not None and conn.context is not None:
            await conn.context.__aexit__(None, None, None)


def _too_large(exc: ClientError, record: ApprovalRecord) -> None:
    """DynamoDB's 400 KB item limit: the call's fault (not retryable), said plainly."""
    if _code(exc) == "ValidationException" and "size" in str(exc).lower():
        raise RecordTooLarge(
            f"approval record larger than {_ITEM_NAME}",
            tool=record.tool,
            approval_id=record.approval_id,
        ) from None
