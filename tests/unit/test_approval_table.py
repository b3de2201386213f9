"""Exactly once, the approvals table's local store holds only what committed."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from stream_adapter.approvals import new_record
from stream_adapter.envelope import Envelope
from stream_adapter.stream.approvals import ApprovalTable
from stream_adapter.stream.engine import DurableTable
from stream_adapter.stream.engine.commits.transactions import TransactionGuard


class _Sender:
    exactly_once = True

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes]] = []

    def transaction_of_current(self) -> str:
        return "app-1-0"

    async def in_transaction(self, topic: str, key: bytes, value: bytes | None, **_: Any) -> None:
        self.sent.append((topic, key))


def _approvals(faust_table: Any, sender: Any, guard: TransactionGuard) -> ApprovalTable:
    return ApprovalTable(DurableTable(faust_table, sender, guard))


def _table() -> Any:
    data: dict[bytes, bytes] = {}
    return SimpleNamespace(
        data=data, get=data.get, changelog_topic=SimpleNamespace(get_topic_name=lambda: "cl")
    )


def _record() -> Any:
    envelope = Envelope("send_invoice", {}, "run-1", "call-1", None, "calls:0:7", "kafka")
    return new_record(envelope, "send_invoice", origin="kafka:test")


async def test_a_write_reaches_the_store_when_its_transaction_commits() -> None:
    guard = TransactionGuard(lambda: None)
    faust_table, outputs = _table(), _Sender()
    table = _approvals(faust_table, outputs, guard)
    record = _record()
    await table.put(record, 0)
    assert outputs.sent == [("cl", record.approval_id.encode())]
    assert faust_table.data == {}  # staged only
    assert table.get(record.approval_id) == record  # but read through
    guard.committed(["app-1-0"])
    assert faust_table.data == {record.approval_id.encode(): record.to_bytes()}


async def test_a_write_in_a_dropped_transaction_never_reaches_the_store() -> None:
    guard = TransactionGuard(lambda: None)
    faust_table = _table()
    table = _approvals(faust_table, _Sender(), guard)
    record = _record()
    await table.put(record, 0)
    await guard.reset(SimpleNamespace(_transaction_producers={}))
    assert table.get(record.approval_id) is None and faust_table.data == {}
    guard.committed(["app-1-0"])
    assert faust_table.data == {}


async def test_a_delete_is_a_tombstone_staged_until_its_transaction_commits() -> None:
    guard = TransactionGuard(lambda: None)
    faust_table, outputs = _table(), _Sender()
    table = _approvals(faust_table, outputs, guard)
    record = _record()
    key = record.approval_id.encode()
    faust_table.data[key] = record.to_bytes()  # committed earlier
    await table.delete(record.approval_id, 0)
    assert outputs.sent == [("cl", key)]
    assert faust_table.data == {key: record.to_bytes()}  # staged only
    assert table.get(record.approval_id) is None  # but read through: gone
    await guard.reset(SimpleNamespace(_transaction_producers={}))
    assert table.get(record.approval_id) == record  # an abort takes the delete back
    await table.delete(record.approval_id, 0)
    guard.committed(["app-1-0"])
    assert faust_table.data == {} and table.get(record.approval_id) is None
