"""A Faust table of bytes keys and values whose writes are acknowledged before they count.

Each write waits until its changelog record is acknowledged by the broker, and reaches the
local store (RocksDB, which outlives a crash) only then: until the ack it is held in memory
and read through. A write the store took before its changelog did survived a SIGKILL in the
store alone; the redelivered message found it there and wrote nothing, and the worker that
restored the partition from the changelog never saw it (docs/chaos.md). Exactly once, a write
joins the transaction of the message being processed and reaches the local store only once
that transaction commits (staged until then, and read through), so the store never holds
what an abort took back; with `now`, it goes outside the transaction, durable at once.
With claims (engine/claims.py), a write outside the message's transaction (every write at
least once, a `now` write exactly once) is a transaction of the partition's claim: a worker
that lost the partition cannot write it (OwnershipLost), so its changelog never disagrees
with its owner's table.
A delete is a write of None: a tombstone on the changelog, which compaction later drops.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable
from typing import Any

from faust.types import TP
from rocksdict import WriteBatch

from stream_adapter.stream.engine.claims import Claim, PartitionClaims, Write
from stream_adapter.stream.engine.commits.transactions import TransactionGuard
from stream_adapter.stream.engine.producer import Sender, acked, check_size


class DurableTable:
    """Durable reads and writes of a Faust table (`app.Table` with bytes keys and values)."""

    def __init__(
        self,
        table: Any,
        sender: Sender,
        guard: TransactionGuard | None = None,
        claims: PartitionClaims | None = None,
    ) -> None:
        self._table = table
        self._sender = sender
        self._claims = claims
        self._staged: dict[str, dict[bytes, tuple[int, bytes | None]]] = {}  # by transactional id
        self._unacked: dict[bytes, tuple[bytes | None, object]] = {}  # the key's latest write
        if guard is not None:
            guard.on_commit.append(self._committed)
            guard.on_reset.append(self._staged.clear)

    def get(self, key: bytes) -> bytes | None:
        """The value of key: staged in an open transaction, else written and not yet
        acknowledged, else in the local store."""
        for writes in self._staged.values():
            if key in writes:
                return writes[key][1]
        unacked = self._unacked.get(key)
        if unacked is not None:
            return unacked[0]
        return self._table.get(key)  # type: ignore[no-any-return]

    def values(self) -> Iterable[bytes]:
        """Every value in this worker's table partitions (committed ones only)."""
        return self._table.data.values()  # type: ignore[no-any-return]

    async def claim(self, partition: int) -> Claim | None:
        """This worker's current claim of partition (None without claims); OwnershipLost
        when it does not own it."""
        return None if self._claims is None else await self._claims.claim(partition)

    async def put(
        self,
        key: bytes,
        value: bytes | None,
        partition: int,
        *,
        now: bool = False,
        claim: Claim | None = None,
        finishing: bool = False,
    ) -> None:
        """Store value (None: delete key) and wait until its changelog entry (a tombstone for
        None) is acknowledged by the broker.

        Exactly once the entry joins the current message's transaction, except with `now`.
        RecordTooLarge, nothing written, for a record above MAX_RECORD_BYTES. With claims, a
        write outside that transaction goes through claim (by default the partition's current
        one) and raises OwnershipLost once the partition changed hands, or while a rebalance
        revokes it unless finishing (the outcome of a run already started).
        """
        topic = self._table.changelog_topic.get_topic_name()
        check_size(topic, key, value)
        exactly_once = self._sender.exactly_once
        if self._claims is not None and (now or not exactly_once):
            if exactly_once:
                for writes in self._staged.values():
                    writes.pop(key, None)
            claim = claim or await self._claims.claim(partition)
            claimed = self._claimed(claim, key, value, partition, finishing)
            await self._acked(key, value, partition, claimed, with_offset=not exactly_once)
            return
        if not exactly_once:
            sent = acked(self._table.send_changelog(partition, key, value), topic)
            await self._acked(key, value, partition, sent)
            return
        if now:
            for writes in self._staged.values():
                writes.pop(key, None)
            sent = self._sender.outside_transaction(topic, key, value, partition)
            await self._acked(key, value, partition, sent)
            return
        await self._sender.in_transaction(topic, key, value, partition=partition)
        # Staged only once sent: a commit waiting for the send would apply it too early, and
        # nothing can commit between the send and this job's ack (commits/gate.py).
        tid = self._sender.transaction_of_current()
        self._staged.setdefault(tid, {})[key] = (partition, value)

    async def _claimed(
        self, claim: Claim, key: bytes, value: bytes | None, partition: int, finishing: bool
    ) -> int:
        """Write through claim; the changelog offset of the record once acknowledged."""
        topic = self._table.changelog_topic.get_topic_name()
        write = claim.write([Write(topic, key, value, partition)], finishing=finishing)
        [written] = await acked(write, topic)
        return int(written.offset)

    async def _acked(
        self,
        key: bytes,
        value: bytes | None,
        partition: int,
        sent: Awaitable[Any],
        *,
        with_offset: bool = False,
    ) -> None:
        """Read value through until its changelog record is acknowledged, then store it
        (with_offset: with the changelog offset sent gives, which restore starts after)."""
        token = object()
        self._unacked[key] = (value, token)
        try:
            result = await sent
        finally:
            if self._unacked.get(key, (None, None))[1] is token:
                del self._unacked[key]  # a later write of the key reads through instead
        self._apply(key, value, partition, offset=result if with_offset else None)

    def _committed(self, transactional_id: str) -> None:
        for key, (partition, value) in self._staged.pop(transactional_id, {}).items():
            self._apply(key, value, partition)

    def _apply(
        self, key: bytes, value: bytes | None, partition: int, offset: int | None = None
    ) -> None:
        """Write value (None: delete) to the local store; with offset, the changelog offset
        its restore starts after (as Faust's own changelog send at least once), in the same
        RocksDB write batch. Apart, a crash between the two could leave the offset past a
        record the store never took: restore skipped it, and a redelivered decision found
        no `running` mark and ran the call again."""
        store = self._table.data
        if hasattr(store, "_db_for_partition"):
            # Possibly outside any event: Faust's RocksDB store takes the partition from the
            # current event, so write to the partition's database as it would.
            db = store._db_for_partition(partition)
            writes = WriteBatch(raw_mode=True)
            if value is None:
                store._key_index.pop(key, None)
                writes.delete(key)
            else:
                store._key_index[key] = partition
                writes.put(key, value)
            if offset is not None:
                writes.put(store.offset_key, str(offset).encode())
            db.write(writes)
            return
        if value is None:
            store.pop(key, None)
        else:
            store[key] = value
        if offset is not None and hasattr(store, "set_persisted_offset"):
            store.set_persisted_offset(
                TP(self._table.changelog_topic.get_topic_name(), partition), offset
            )
