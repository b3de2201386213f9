"""Exactly once: a partition's transaction commits whole with its offsets, or is aborted and
its messages redone from the committed offset.

Faust keeps one transactional producer per partition (transactional id
`{app id}-{topic group}-{partition}`) and commits it on a timer with the acked offsets.
`TransactionGuard` decides which of those transactions may commit: one that may hold a failed
job's outputs, or whose commit failed, never does, and the group rejoins so every partition
restarts from its commit with fresh producers; at each rebalance every producer not idle is
dropped, so no transaction spans two assignments. The `guarded_*` functions are how Faust's
producer and transaction manager consult it (installed by engine/patches.py; each fault they
fix is in docs/faust-patches.md). The commit at a revocation is in the consumer
(`FastConsumer.on_partitions_revoked`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from aiokafka.producer.transaction_manager import TransactionState

from stream_adapter.core import logs

STOP_TIMEOUT_S = 10.0


def transactional_id(app: Any, topic: str, partition: int) -> str:
    """The transactional id Faust gives the partition of a consumed topic."""
    return f"{app.conf.id}-{app.assignor.group_for_topic(topic)}-{partition}"


class TransactionFailed(Exception):
    """A send into a transaction marked failed: it will be aborted, and the message redone
    after the rebalance (internal to the stream layer, like signing's SignatureError)."""


class TransactionGuard:
    """Which partitions' open transactions must not be committed, until the next rebalance."""

    def __init__(self, rejoin: Callable[[], None]) -> None:
        self._rejoin = rejoin
        self._failed: set[str] = set()
        self.on_commit: list[Callable[[str], None]] = []
        """Called with each transactional id whose transaction committed."""
        self.on_reset: list[Callable[[], None]] = []
        """Called when every open transaction is dropped (a rebalance)."""

    def committed(self, transactional_ids: Iterable[str]) -> None:
        """Tell the `on_commit` hooks which transactions committed."""
        for tid in transactional_ids:
            for hook in self.on_commit:
                hook(tid)

    def fail(self, transactional_id: str, reason: BaseException | str) -> None:
        """Never commit this transaction; rejoin the group so its partition is redone."""
        kind = reason if isinstance(reason, str) else type(reason).__name__
        if transactional_id not in self._failed:
            self._failed.add(transactional_id)
            logs.event(
                logs.WARNING,
                "transaction failed; rejoining the group",
                transactional_id=transactional_id,
                error_kind=kind,
            )
        self._rejoin()

    def failed(self, transactional_id: str) -> bool:
        return transactional_id in self._failed

    def committable(
        self, by_transactional_id: Mapping[str, Mapping[Any, int]]
    ) -> dict[str, Mapping[Any, int]]:
        return {t: o for t, o in by_transactional_id.items() if t not in self._failed}

    async def reset(self, producer: Any) -> None:
        """Drop every transactional producer that is not idle; forget the failures."""
        producers: dict[str, Any] = producer._transaction_producers
        for tid, current in list(producers.items()):
            manager = getattr(current, "_txn_manager", None)
            if manager is not None and manager.state == TransactionState.READY:
                continue
            producers.pop(tid, None)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(current.stop(), STOP_TIMEOUT_S)
        self._failed.clear()
        for hook in self.on_reset:
            hook()


def _guard(transaction_manager: Any) -> TransactionGuard | None:
    return getattr(transaction_manager.app, "transaction_guard", None)


Method = Callable[..., Awaitable[Any]]


def guarded_begin_transaction(begin: Method) -> Method:
    """Faust's `Producer.begin_transaction`, one at a time per id, replacing a fatal producer."""

    async def begin_transaction(self: Any, transactional_id: str) -> None:
        # One at a time per id: two concurrent first begins would build two producers, and
        # the second to register would fence the first.
        locks = self.__dict__.setdefault("_stream_adapter_begin_locks", {})
        async with locks.setdefault(transactional_id, asyncio.Lock()):
            current = self._transaction_producers.get(transactional_id)
            manager = getattr(current, "_txn_manager", None)
            if manager is not None and manager.state == TransactionState.FATAL_ERROR:
                self._transaction_producers.pop(transactional_id, None)
                await current.stop()
            await begin(self, transactional_id)
            manager = getattr(
                self._transaction_producers.get(transactional_id), "_txn_manager", None
            )
            if manager is not None:
                setattr(manager, EARLY_GROUP, self.app.conf.id)

    return begin_transaction


EARLY_GROUP = "_stream_adapter_offsets_group"
"""The consumer group a transactional producer's manager adds to each transaction early
(`early_offsets_group`); set by `guarded_begin_transaction` on the worker's producers only."""


def early_offsets_group(own: Callable[[Any], str | None]) -> Callable[[Any], str | None]:
    """aiokafka's `TransactionManager.consumer_group_to_add`, which also names the worker's
    group once the transaction's first partitions are in it: `AddOffsetsToTxn` then goes out
    while the transaction's records are produced, and a commit takes two round trips
    (`TxnOffsetCommit`, `EndTxn`) instead of three. An empty transaction adds nothing."""

    def consumer_group_to_add(self: Any) -> str | None:
        group = own(self)
        if (
            group is None
            and self._txn_consumer_group is None
            and self._txn_partitions
            and self.state == TransactionState.IN_TRANSACTION
        ):
            return getattr(self, EARLY_GROUP, None)
        return group

    return consumer_group_to_add


async def guarded_commit(
    self: Any, offsets: Mapping[Any, int], start_new_transaction: bool = True
) -> bool:
    """`TransactionManager.commit` that skips failed transactions and never raises: a commit
    that fails marks its transaction failed (the group rejoins and redoes it). The
    partitions' transactions commit concurrently, not one after another as Faust's
    `commit_transactions` does: every job waits at the gate while they do."""
    guard = _guard(self)
    by_tid: dict[str, dict[Any, int]] = defaultdict(dict)
    for tp, offset in offsets.items():
        by_tid[transactional_id(self.app, tp.topic, tp.partition)][tp] = offset
    todo = guard.committable(by_tid) if guard is not None else dict(by_tid)
    if not todo:
        return False
    group_id = self.app.conf.id
    producers = self.producer._transaction_producers

    locks = self.producer._trn_locks

    async def commit_one(tid: str, tid_offsets: Mapping[Any, int]) -> None:
        current = producers.get(tid)
        if current is None:
            raise KeyError(f"no producer for {tid}")
        async with locks.setdefault(tid, asyncio.Lock()):  # Faust's, as its own commit
            manager = getattr(current, "_txn_manager", None)
            if manager is not None and manager.state == TransactionState.READY:
                # Offsets alone (a message whose only output went outside the transaction)
                # after a commit that began none: aiokafka sends offsets only in one.
                await current.begin_transaction()
            await current.send_offsets_to_transaction(tid_offsets, group_id)
            await current.commit_transaction()
            if start_new_transaction:
                await current.begin_transaction()

    tids = list(todo)
    outcomes = await asyncio.gather(
        *(commit_one(tid, todo[tid]) for tid in tids), return_exceptions=True
    )
    done = [tid for tid, outcome in zip(tids, outcomes, strict=True) if outcome is None]
    for tid, outcome in zip(tids, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            # Fenced, timed out, broker gone: the outcome is unknown.
            if guard is None or not isinstance(outcome, Exception):
                raise outcome
            guard.fail(tid, outcome)
    if guard is not None:
        guard.committed(done)
    return bool(done)


def guarded_on_rebalance(on_rebalance: Method) -> Method:
    """`TransactionManager.on_rebalance` that first drops every producer not idle."""

    async def rebalance(self: Any, assigned: Any, revoked: Any, newly_assigned: Any) -> None:
        guard = _guard(self)
        if guard is not None:
            await guard.reset(self.producer)
        await on_rebalance(self, assigned, revoked, newly_assigned)

    return rebalance
