"""Exactly once, the approvals table's local store holds only what committed."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from stream_adapter.core.approvals import new_record
from stream_adapter.core.envelope import Envelope
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


class _AtLeastOnce:
    exactly_once = False


def _changelog_table() -> tuple[Any, list[Any]]:
    """A Faust table whose changelog sends wait on futures the test resolves."""
    import asyncio

    sends: list[asyncio.Future[None]] = []

    def send_changelog(partition: int, key: bytes, value: bytes | None) -> Any:
        sends.append(asyncio.get_running_loop().create_future())
        return sends[-1]

    table = _table()
    table.send_changelog = send_changelog
    return table, sends


async def _write_in_flight() -> tuple[Any, list[Any], ApprovalTable, Any, Any]:
    """At least once: a record's write begun, its changelog send not yet acknowledged."""
    import asyncio

    faust_table, sends = _changelog_table()
    table = _at_least_once(faust_table)
    record = _record()
    writing = asyncio.create_task(table.put(record, 0))
    await asyncio.sleep(0)
    return faust_table, sends, table, record, writing


def _at_least_once(faust_table: Any) -> ApprovalTable:
    sender: Any = _AtLeastOnce()  # what DurableTable reads of the worker's Sender
    return ApprovalTable(DurableTable(faust_table, sender))


async def test_at_least_once_a_write_reaches_the_store_only_once_its_changelog_is_acked() -> None:
    # A SIGKILL between the store's write and the ack left the record in RocksDB alone: the
    # redelivered park request found it and wrote nothing, and the worker that restored the
    # partition from the changelog dropped the call's decision as unknown (docs/chaos.md).
    faust_table, sends, table, record, writing = await _write_in_flight()
    assert faust_table.data == {}  # what a crash now would leave in the store
    assert table.get(record.approval_id) == record  # read through meanwhile
    sends[0].set_result(None)
    await writing
    assert faust_table.data == {record.approval_id.encode(): record.to_bytes()}
    assert table.get(record.approval_id) == record


async def test_a_write_whose_changelog_send_fails_never_counts() -> None:
    import pytest

    faust_table, sends, table, record, writing = await _write_in_flight()
    sends[0].set_exception(ConnectionError("broker gone"))
    with pytest.raises(ConnectionError):
        await writing
    assert faust_table.data == {} and table.get(record.approval_id) is None


async def test_of_two_writes_in_flight_the_later_is_read_until_both_are_acked() -> None:
    import asyncio

    faust_table, sends = _changelog_table()
    table = _at_least_once(faust_table)
    first = _record()
    second = first.model_copy(update={"runs": first.runs + 1})
    writes = [asyncio.create_task(table.put(r, 0)) for r in (first, second)]
    await asyncio.sleep(0)
    sends[0].set_result(None)
    await writes[0]
    assert table.get(first.approval_id) == second  # the later write, still in flight
    sends[1].set_result(None)
    await writes[1]
    assert faust_table.data == {first.approval_id.encode(): second.to_bytes()}


class _NowSender(_Sender):
    def __init__(self) -> None:
        import asyncio

        super().__init__()
        self.acked = asyncio.Event()

    async def outside_transaction(self, topic: str, key: bytes, *_: Any) -> None:
        await self.acked.wait()
        self.sent.append((topic, key))


async def test_exactly_once_a_write_outside_the_transaction_reaches_the_store_once_acked() -> None:
    import asyncio

    guard = TransactionGuard(lambda: None)
    faust_table, outputs = _table(), _NowSender()
    table = _approvals(faust_table, outputs, guard)
    record = _record()
    writing = asyncio.create_task(table.put(record, 0, now=True))
    await asyncio.sleep(0)
    assert faust_table.data == {} and table.get(record.approval_id) == record
    outputs.acked.set()
    await writing
    assert faust_table.data == {record.approval_id.encode(): record.to_bytes()}


class _OrderedStore(dict[bytes, bytes]):
    """A local store that records the order of its writes: records, and the changelog offset
    its restore would start after (as Faust's RocksDB store keeps it)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[str, Any]] = []

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self.writes.append(("record", key))
        super().__setitem__(key, value)

    def set_persisted_offset(self, tp: Any, offset: int) -> None:
        self.writes.append(("offset", offset))


class _Claims:
    """This worker owns the partition; the claim's write is acked at changelog offset 41."""

    async def claim(self, partition: int) -> Any:
        async def write(records: Any, *, finishing: bool = False) -> list[Any]:
            return [SimpleNamespace(offset=41)]

        return SimpleNamespace(write=write)


async def test_at_least_once_the_store_takes_a_claimed_record_before_its_offset() -> None:
    # The offset first, a crash before the record left the store past a record it never
    # held: its restore started after it, and a redelivered decision found no `running` mark
    # and ran the call again. The record first, the same crash replays it.
    store = _OrderedStore()
    faust_table = _table()
    faust_table.data = store
    sender: Any = _AtLeastOnce()
    claims: Any = _Claims()
    table = ApprovalTable(DurableTable(faust_table, sender, claims=claims))
    record = _record()
    await table.put(record, 0)
    assert store.writes == [("record", record.approval_id.encode()), ("offset", 41)]
    assert store[record.approval_id.encode()] == record.to_bytes()


async def test_in_rocksdb_a_claimed_record_and_its_offset_are_one_write(tmp_path: Any) -> None:
    """The worker's own RocksDB store: the record and the offset restore starts after land
    together, and a delete takes the record out and moves the offset the same way."""
    from faust.types import TP

    from stream_adapter.core.executor import Executor
    from stream_adapter.core.tools import ToolRegistry
    from stream_adapter.settings import Settings
    from stream_adapter.stream.app import build_app

    settings = Settings.for_app("table-offsets", data_dir=str(tmp_path))
    app = build_app(settings, Executor(ToolRegistry()))
    faust_table = app.tables["approvals"]
    store = faust_table.data
    assert store.use_rocksdict  # the store the worker runs on
    sender: Any = _AtLeastOnce()
    claims: Any = _Claims()
    table = ApprovalTable(DurableTable(faust_table, sender, claims=claims))
    record = _record()
    key = record.approval_id.encode()
    changelog = TP(faust_table.changelog_topic.get_topic_name(), 0)
    try:
        await table.put(record, 0)
        assert store._db_for_partition(0)[key] == record.to_bytes()
        assert store.persisted_offset(changelog) == 41
        assert table.get(record.approval_id) == record
        await table.delete(record.approval_id, 0)
        assert key not in store._db_for_partition(0)
        assert table.get(record.approval_id) is None
    finally:
        for db in store._dbs.values():
            db.close()
