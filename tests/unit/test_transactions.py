"""Exactly-once transactions: failed ones never committed, open ones dropped at a rebalance,
fatal producers replaced, one producer per transactional id, partitions committed at once."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from aiokafka.producer.transaction_manager import TransactionState
from faust.transport.consumer import TransactionManager
from faust.transport.drivers.aiokafka import Producer
from faust.types import TP

from stream_adapter.stream.engine import patches
from stream_adapter.stream.engine.commits.transactions import EARLY_GROUP, TransactionGuard


class _TxnProducer:
    def __init__(
        self,
        state: TransactionState,
        error: Exception | None = None,
        hold: asyncio.Event | None = None,
    ) -> None:
        self._txn_manager = SimpleNamespace(state=state)
        self.events: list[str] = []
        self.error = error
        self.hold = hold  # commit_transaction waits for it
        self.offsets: list[dict[Any, int]] = []

    async def send_offsets_to_transaction(self, offsets: dict[Any, int], group_id: str) -> None:
        assert group_id == "app"
        if self.error is not None:
            raise self.error
        self.offsets.append(dict(offsets))

    async def commit_transaction(self) -> None:
        self.events.append("commit")
        if self.hold is not None:
            await self.hold.wait()

    async def start(self) -> None:
        self.events.append("start")

    async def stop(self) -> None:
        self.events.append("stop")

    async def begin_transaction(self) -> None:
        self.events.append("begin")


def _faust_producer(current: _TxnProducer, fresh: _TxnProducer) -> Any:
    return SimpleNamespace(
        _transaction_producers={"t-0": current},
        _trn_locks={},
        _new_producer=lambda transactional_id: fresh,
        _ensure_producer=lambda: None,
        app=SimpleNamespace(conf=SimpleNamespace(id="app")),
    )


async def test_a_fatal_producer_is_stopped_and_a_fresh_one_begins() -> None:
    patches.install()
    patches.install()  # idempotent: wrapped once
    fatal, fresh = _TxnProducer(TransactionState.FATAL_ERROR), _TxnProducer(TransactionState.READY)
    faust_producer = _faust_producer(fatal, fresh)
    await Producer.begin_transaction(faust_producer, "t-0")
    assert fatal.events == ["stop"]
    assert fresh.events == ["start", "begin"]
    assert faust_producer._transaction_producers["t-0"] is fresh


async def test_a_healthy_producer_is_kept() -> None:
    patches.install()
    ready, unused = _TxnProducer(TransactionState.READY), _TxnProducer(TransactionState.READY)
    faust_producer = _faust_producer(ready, unused)
    faust_producer._trn_locks["t-0"] = asyncio.Lock()
    await Producer.begin_transaction(faust_producer, "t-0")
    assert ready.events == ["begin"] and unused.events == []


class _Guarded:
    """The parts of a Faust TransactionManager the patched commit and rebalance use."""

    def __init__(self, guard: TransactionGuard, producer: Any) -> None:
        self.app = SimpleNamespace(
            conf=SimpleNamespace(id="app"),
            assignor=SimpleNamespace(group_for_topic=lambda topic: 0),
            transaction_guard=guard,
        )
        self.producer = producer


class _Committing:
    """Faust's producer: the transactional producers by id, and Faust's locks."""

    def __init__(self, **producers: _TxnProducer) -> None:
        self._transaction_producers = {tid.replace("_", "-"): p for tid, p in producers.items()}
        self._trn_locks: dict[str, asyncio.Lock] = {}

    def committed(self) -> list[str]:
        return sorted(t for t, p in self._transaction_producers.items() if "commit" in p.events)


def _busy(error: Exception | None = None) -> _TxnProducer:
    return _TxnProducer(TransactionState.IN_TRANSACTION, error)


def _tp(partition: int) -> TP:
    return TP("calls", partition)


async def test_a_failed_transaction_is_never_committed_and_the_group_rejoins() -> None:
    patches.install()
    rejoins: list[int] = []
    guard = TransactionGuard(lambda: rejoins.append(1))
    producer = _Committing(app_0_0=_busy(), app_0_1=_busy())
    manager = _Guarded(guard, producer)
    guard.fail("app-0-1", RuntimeError("boom"))
    assert guard.failed("app-0-1") and rejoins == [1]
    did = await TransactionManager.commit(manager, {_tp(0): 5, _tp(1): 7})
    assert did is True
    assert producer.committed() == ["app-0-0"]
    assert producer._transaction_producers["app-0-0"].events == ["commit", "begin"]
    assert await TransactionManager.commit(manager, {_tp(1): 8}) is False


async def test_a_commit_that_raises_fails_its_transactions_instead_of_crashing() -> None:
    patches.install()
    rejoins: list[int] = []
    guard = TransactionGuard(lambda: rejoins.append(1))
    producer = _Committing(app_0_2=_busy(RuntimeError("fenced")), app_0_3=_busy())
    manager = _Guarded(guard, producer)
    assert await TransactionManager.commit(manager, {_tp(2): 3, _tp(3): 1}) is True
    assert guard.failed("app-0-2") and rejoins == [1]
    assert not guard.failed("app-0-3") and producer.committed() == ["app-0-3"]
    assert await TransactionManager.commit(manager, {_tp(2): 4}) is False


async def test_the_partitions_transactions_commit_at_once() -> None:
    patches.install()
    hold = asyncio.Event()
    first = _TxnProducer(TransactionState.IN_TRANSACTION, hold=hold)
    second = _TxnProducer(TransactionState.IN_TRANSACTION, hold=hold)
    producer = _Committing(app_0_0=first, app_0_1=second)
    manager = _Guarded(TransactionGuard(lambda: None), producer)
    commit = asyncio.ensure_future(TransactionManager.commit(manager, {_tp(0): 2, _tp(1): 3}))
    for _ in range(20):  # both commits are under way before either ends
        if first.events == second.events == ["commit"]:
            break
        await asyncio.sleep(0)
    assert first.events == second.events == ["commit"], "one after another, not at once"
    hold.set()
    assert await asyncio.wait_for(commit, 5) is True
    assert first.offsets == [{_tp(0): 2}] and second.offsets == [{_tp(1): 3}]


async def test_a_rebalance_drops_every_producer_not_idle_and_forgets_failures() -> None:
    guard = TransactionGuard(lambda: None)
    idle = _TxnProducer(TransactionState.READY)
    open_ = _TxnProducer(TransactionState.IN_TRANSACTION)
    fatal = _TxnProducer(TransactionState.FATAL_ERROR)
    producer = SimpleNamespace(_transaction_producers={"a": idle, "b": open_, "c": fatal})
    guard.fail("b", "test")
    await guard.reset(producer)
    assert producer._transaction_producers == {"a": idle}
    assert open_.events == ["stop"] and fatal.events == ["stop"] and idle.events == []
    assert not guard.failed("b")


async def test_concurrent_first_begins_build_one_producer() -> None:
    patches.install()
    built: list[_TxnProducer] = []

    def new_producer(transactional_id: str) -> _TxnProducer:
        built.append(_TxnProducer(TransactionState.READY))
        return built[-1]

    faust_producer = SimpleNamespace(
        _transaction_producers={},
        _trn_locks={},
        _new_producer=new_producer,
        _ensure_producer=lambda: None,
        app=SimpleNamespace(conf=SimpleNamespace(id="app")),
    )
    await asyncio.gather(*(Producer.begin_transaction(faust_producer, "t-1") for _ in range(3)))
    assert len(built) == 1
    # Tagged for the early AddOffsetsToTxn (`early_offsets_group`).
    assert getattr(built[0]._txn_manager, EARLY_GROUP) == "app"


async def test_offsets_alone_are_committed_in_a_transaction_begun_for_them() -> None:
    patches.install()
    idle = _TxnProducer(TransactionState.READY)
    busy = _busy()
    producer = _Committing(app_0_0=idle, app_0_1=busy)
    manager = _Guarded(TransactionGuard(lambda: None), producer)
    assert await TransactionManager.commit(manager, {_tp(0): 4, _tp(1): 9}) is True
    assert idle.events == ["begin", "commit", "begin"] and busy.events == ["commit", "begin"]
    assert idle.offsets == [{_tp(0): 4}] and busy.offsets == [{_tp(1): 9}]


async def test_the_group_joins_a_transaction_once_its_first_partitions_have() -> None:
    """AddOffsetsToTxn goes out beside the transaction's records, not at its commit; an empty
    transaction, one in commit, and a producer that is not the worker's add no group."""
    from aiokafka.producer.transaction_manager import TransactionManager as Manager
    from aiokafka.structs import TopicPartition

    patches.install()
    manager, other = Manager("app-1-0", 60_000), Manager("theirs", 60_000)
    setattr(manager, EARLY_GROUP, "app")
    for m in (manager, other):
        m.set_pid_and_epoch(7, 0)
        m.begin_transaction()
    assert manager.consumer_group_to_add() is None  # nothing in the transaction yet
    for m in (manager, other):
        m.maybe_add_partition_to_txn(TopicPartition("replies", 3))
        assert m.consumer_group_to_add() is None  # its partition is still being added
        m.partition_added(TopicPartition("replies", 3))
    assert manager.consumer_group_to_add() == "app"
    assert other.consumer_group_to_add() is None  # aiokafka's own rule for other producers
    manager.consumer_group_added("app")
    assert manager.consumer_group_to_add() is None  # added once
    manager.add_offsets_to_txn({TopicPartition("calls", 3): 11}, "app")
    assert manager.offsets_to_commit() == ({TopicPartition("calls", 3): 11}, "app")
    late = Manager("app-1-1", 60_000)
    setattr(late, EARLY_GROUP, "app")
    late.set_pid_and_epoch(8, 0)
    late.begin_transaction()
    late.maybe_add_partition_to_txn(TopicPartition("replies", 4))
    late.partition_added(TopicPartition("replies", 4))
    late.committing_transaction()
    assert late.consumer_group_to_add() is None  # committing: too late to add it
