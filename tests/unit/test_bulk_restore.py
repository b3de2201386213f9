"""Bulk restore (engine/restore.py): a fetched run of changelog records written to the
partition's RocksDB store in one batch with its offset, as Faust's per-record loop would
leave it, and the end of recovery signalled."""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from faust.types import TP
from rocksdict import Options, Rdict

from stream_adapter.stream.engine.restore import BulkRestore

TOPIC = "app-approvals"
OFFSET_KEY = b"__faust\0offset__"


class _Store:
    """The parts of Faust's RocksDB store the bulk path uses, on a real RocksDB."""

    use_rocksdict = True
    offset_key = OFFSET_KEY

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._dbs: dict[int, Rdict] = {}

    def _db_for_partition(self, partition: int) -> Rdict:
        if partition not in self._dbs:
            path = str(self._folder / f"p{partition}")
            self._dbs[partition] = Rdict(path, options=Options(raw_mode=True))  # as Faust
        return self._dbs[partition]


class _Recovery:
    """Faust's Recovery state the bulk path reads and writes."""

    def __init__(self) -> None:
        self.active_tps: set[TP] = set()
        self.standby_tps: set[TP] = set()
        self.active_offsets: Counter[TP] = Counter()
        self.standby_offsets: Counter[TP] = Counter()
        self.active_highwaters: Counter[TP] = Counter()
        self.standby_highwaters: Counter[TP] = Counter()
        self.buffers: dict[Any, list[Any]] = defaultdict(list)
        self._active_events_received_at: dict[TP, float] = {}
        self._last_flush_at: float | None = None
        self.in_recovery = True
        self.signal_recovery_end = asyncio.Event()

    def need_recovery(self) -> bool:
        return any(
            self.active_highwaters[tp] > (self.active_offsets.get(tp) or -1)
            for tp in self.active_tps
        )

    def flush_buffers(self) -> None:
        self.buffers.clear()

    def _set_recovery_ended(self) -> None:
        self.in_recovery = False


class _Table:
    def __init__(self, store: _Store) -> None:
        self.data = store
        self._on_changelog_event: Any = None


def _rec(offset: int, key: bytes, value: bytes | None) -> SimpleNamespace:
    return SimpleNamespace(offset=offset, key=key, value=value)


def _app(tmp_path: Path) -> tuple[Any, _Store, _Recovery]:
    store = _Store(tmp_path)
    recovery = _Recovery()
    table = _Table(store)
    ready: list[bool] = []
    tables = SimpleNamespace(
        _changelogs={TOPIC: table},
        recovery=recovery,
        standbys_ready=False,
        on_standbys_ready=lambda: ready.append(True),
    )
    consumer = SimpleNamespace(_paused_partitions=set())
    return SimpleNamespace(tables=tables, consumer=consumer), store, recovery


def test_a_batch_is_written_with_its_offset_and_ends_recovery(tmp_path: Path) -> None:
    app, store, recovery = _app(tmp_path)
    tp = TP(TOPIC, 3)
    recovery.active_tps.add(tp)
    recovery.active_offsets[tp] = 1  # the store already holds offsets 0 and 1
    recovery.active_highwaters[tp] = 4
    restore = BulkRestore(app)
    batch = [_rec(1, b"a", b"old"), _rec(2, b"a", b"new"), _rec(3, b"b", b"x"), _rec(4, b"b", None)]
    assert restore.apply(tp, batch, position=5)
    db = store._db_for_partition(3)
    assert db.get(b"a") == b"new"
    assert db.get(b"b") is None  # the tombstone deleted it
    assert db.get(OFFSET_KEY) == b"4"
    assert recovery.active_offsets[tp] == 4
    assert recovery.signal_recovery_end.is_set() and not recovery.in_recovery


def test_records_already_applied_are_skipped(tmp_path: Path) -> None:
    app, store, recovery = _app(tmp_path)
    tp = TP(TOPIC, 0)
    recovery.active_tps.add(tp)
    recovery.active_offsets[tp] = 7
    recovery.active_highwaters[tp] = 9
    store._db_for_partition(0)[b"k"] = b"kept"
    assert BulkRestore(app).apply(tp, [_rec(7, b"k", b"stale")], position=8)
    assert store._db_for_partition(0).get(b"k") == b"kept"
    assert recovery.in_recovery  # offsets 8 and 9 still to come


def test_transaction_markers_at_the_end_do_not_hold_recovery(tmp_path: Path) -> None:
    """The last data record at 5, a commit marker at 6: highwater 6, position 7."""
    app, _, recovery = _app(tmp_path)
    tp = TP(TOPIC, 1)
    recovery.active_tps.add(tp)
    recovery.active_offsets[tp] = -1
    recovery.active_highwaters[tp] = 6
    restore = BulkRestore(app)
    assert restore.apply(tp, [_rec(5, b"a", b"v")], position=6)
    assert recovery.in_recovery  # offset 6 not fetched yet: it may be a record
    restore.settle(lambda _: 7)
    assert recovery.active_offsets[tp] == 6
    assert not recovery.in_recovery


def test_standbys_are_marked_ready_once_caught_up(tmp_path: Path) -> None:
    app, store, recovery = _app(tmp_path)
    recovery.in_recovery = False
    tp = TP(TOPIC, 2)
    recovery.standby_tps.add(tp)
    recovery.standby_offsets[tp] = -1
    recovery.standby_highwaters[tp] = 1
    restore = BulkRestore(app)
    assert restore.apply(tp, [_rec(0, b"a", b"1")], position=1)
    assert not app.tables.standbys_ready and store._db_for_partition(2).get(b"a") == b"1"
    app.tables.on_standbys_ready = lambda: setattr(app.tables, "standbys_ready", True)
    assert restore.apply(tp, [_rec(1, b"b", b"2")], position=2)
    assert app.tables.standbys_ready


def test_partitions_it_does_not_serve_go_to_faust(tmp_path: Path) -> None:
    app, _, recovery = _app(tmp_path)
    restore = BulkRestore(app)
    assert not restore.apply(TP("another-topic", 0), [_rec(0, b"a", b"v")], position=1)
    assert not restore.apply(TP(TOPIC, 5), [_rec(0, b"a", b"v")], position=1)  # not assigned
    app.tables._changelogs[TOPIC]._on_changelog_event = print
    recovery.active_tps.add(TP(TOPIC, 0))
    assert not restore.apply(TP(TOPIC, 0), [_rec(0, b"a", b"v")], position=1)


def test_nothing_ends_while_recovery_is_being_set_up(tmp_path: Path) -> None:
    """Faust pauses every assigned partition at a rebalance and resumes the changelog ones
    once their highwaters are built: until then the offsets may be the last assignment's."""
    app, _, recovery = _app(tmp_path)
    tp = TP(TOPIC, 0)
    recovery.active_tps.add(tp)
    recovery.active_offsets[tp] = 3  # no highwater yet: nothing seems left to restore
    app.consumer._paused_partitions.add(tp)
    restore = BulkRestore(app)
    restore.settle(lambda _: 9)
    assert recovery.in_recovery and not recovery.signal_recovery_end.is_set()
    app.consumer._paused_partitions.clear()
    recovery.active_highwaters[tp] = 5
    restore.settle(lambda _: 4)  # offsets 4 and 5 not fetched yet
    assert recovery.in_recovery
    restore.settle(lambda _: 6)
    assert not recovery.in_recovery and recovery.signal_recovery_end.is_set()
