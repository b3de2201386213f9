"""Table restore in bulk: each fetched run of a changelog partition's records written to its
RocksDB store in one WriteBatch, with the partition's applied offset in the same batch.

Faust hands each changelog record through its conductor (four asyncio tasks, an Event, a
queue) to `Recovery._slurp_changelogs`, which buffers it and writes a thousand at a time:
about 80 µs a record on two cores, most of a restore (docs/bench.md). The consumer hands
a table partition's records here instead (engine/consumer.py); what Faust's loop does per
record (skip what the store already holds, write, advance the recovery offset, signal the
end of active recovery, mark the standbys ready) is done per batch. An exactly-once
changelog whose last records are transaction markers ends when the consumer's position
passes them, where Faust waits for two idle 5 s polls. Tables with a changelog callback, or
stores other than RocksDB, keep Faust's path.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from rocksdict import WriteBatch

from stream_adapter.core import logs


class BulkRestore:
    """Applies fetched changelog records of the app's RocksDB tables to their stores."""

    def __init__(self, app: Any) -> None:
        self._app = app
        self._active = 0  # records applied to active partitions since the last end of recovery
        self._standby = 0  # records applied to standby partitions since they were last ready

    def apply(self, tp: Any, batch: Sequence[Any], position: int | None) -> bool:
        """Write batch (aiokafka records of changelog partition tp, in offset order) to its
        table's store; False when tp is not a table partition this path serves (Faust's
        conductor gets it). position: the consumer's next offset of tp, once batch is out."""
        tables = self._app.tables
        table = tables._changelogs.get(tp.topic)
        if table is None or getattr(table, "_on_changelog_event", None) is not None:
            return False
        store = table.data
        if not getattr(store, "use_rocksdict", False) or not hasattr(store, "_db_for_partition"):
            return False
        recovery = tables.recovery
        active = tp in recovery.active_tps
        if active:
            offsets, highwaters = recovery.active_offsets, recovery.active_highwaters
            recovery._active_events_received_at[tp] = time.monotonic()
        elif tp in recovery.standby_tps:
            offsets, highwaters = recovery.standby_offsets, recovery.standby_highwaters
        else:
            return False
        if recovery.buffers.get(table):
            recovery.flush_buffers()  # records Faust's path took first go first
        seen = offsets.get(tp)
        writes = WriteBatch(raw_mode=True)
        last = None
        for record in batch:
            offset = record.offset
            if seen is not None and offset <= seen:
                continue
            if record.value is None:
                writes.delete(record.key)
            else:
                writes.put(record.key, record.value)
            last = offset
        if last is not None:
            count = writes.len()
            writes.put(store.offset_key, str(last).encode())
            store._db_for_partition(tp.partition).write(writes)
            offsets[tp] = last
            if active:
                self._active += count
            else:
                self._standby += count
            recovery._last_flush_at = time.monotonic()
        _past_markers(offsets, highwaters, tp, position)
        self._signal(recovery)
        return True

    def settle(self, position_of: Callable[[Any], int | None]) -> None:
        """Count as done the recovering partitions whose consumer position passed their
        highwater with only transaction markers since their last record (a fetch of markers
        alone hands no record out), and signal what that ends. Called between fetches."""
        tables = self._app.tables
        recovery = tables.recovery
        if self._reading(recovery.active_tps) and recovery.in_recovery:
            for tp in list(recovery.active_tps):
                if tp.topic in tables._changelogs:
                    _past_markers(
                        recovery.active_offsets, recovery.active_highwaters, tp, position_of(tp)
                    )
        elif self._reading(recovery.standby_tps) and not tables.standbys_ready:
            for tp in list(recovery.standby_tps):
                if tp.topic in tables._changelogs:
                    _past_markers(
                        recovery.standby_offsets, recovery.standby_highwaters, tp, position_of(tp)
                    )
        else:
            return
        self._signal(recovery)

    def _reading(self, tps: set[Any]) -> bool:
        """Recovery reads tps: Faust resumes them once their highwaters and start offsets are
        built, and pauses every assigned partition at each rebalance, so before that the
        recovery state may still be the previous assignment's."""
        return bool(tps) and not tps & self._app.consumer._paused_partitions

    def _signal(self, recovery: Any) -> None:
        """What Faust's loop does after each record: end active recovery once no active
        partition has records left, and mark the standbys ready once none has."""
        ending = recovery.in_recovery and self._reading(recovery.active_tps)
        if ending and not recovery.need_recovery():
            recovery.flush_buffers()
            recovery._set_recovery_ended()
            recovery.signal_recovery_end.set()
            logs.event(logs.INFO, "table partitions restored", records=self._active)
            self._active = 0
        tables = self._app.tables
        if (
            not tables.standbys_ready
            and not recovery.in_recovery
            and self._reading(recovery.standby_tps)
            and _caught_up(recovery)
        ):
            tables.on_standbys_ready()
            logs.event(
                logs.INFO,
                "standby table partitions caught up",
                partitions=len(recovery.standby_tps),
                records=self._standby,
            )
            self._standby = 0


def _past_markers(offsets: Any, highwaters: Any, tp: Any, position: int | None) -> None:
    """Count tp as applied up to its highwater when the consumer's next offset lies past it:
    every record below the position was handed out and applied, so only transaction markers
    or aborted records lie between the last one applied and the highwater."""
    high, applied = highwaters.get(tp), offsets.get(tp)
    if high is None or position is None or position <= high:
        return
    if applied is None or applied < high:
        offsets[tp] = high


def _caught_up(recovery: Any) -> bool:
    """Every standby partition has applied its records up to its highwater (Faust's
    `standby_remaining_total` raises while a partition's offset is still unknown)."""
    highwaters, offsets = recovery.standby_highwaters, recovery.standby_offsets
    for tp in recovery.standby_tps:
        high, applied = highwaters.get(tp), offsets.get(tp)
        if high is None or applied is None or applied < high:
            return False
    return True
