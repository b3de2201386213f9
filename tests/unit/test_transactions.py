"""Exactly-once transactions: failed ones never committed, open ones dropped at a rebalance,
fatal producers replaced, one producer per transactional id."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from aiokafka.producer.transaction_manager import TransactionState
from faust.transport.consumer import TransactionManager
from faust.transport.drivers.aiokafka import Producer
from faust.types import TP

from stream_adapter.stream.engine import patches
from stream_adapter.stream.engine.commits.transactions import TransactionGuard


class _TxnProducer:
    def __init__(self, state: TransactionState) -> None:
        self._txn_manager = SimpleNamespace(state=state)
        self.events: list[str] = []

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
    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.committed: list[dict[str, Any]] = []
        self._transaction_producers: dict[str, _TxnProducer] = {}

    async def commit_transactions(
        self, offsets: dict[str, Any], group_id: str, start_new_transaction: bool = True
    ) -> None:
        if self.error is not None:
            raise self.error
        self.committed.append(offsets)


def _tp(partition: int) -> TP:
    return TP("calls", partition)


async def test_a_failed_transaction_is_never_committed_and_the_group_rejoins() -> None:
    patches.install()
    rejoins: list[int] = []
    guard = TransactionGuard(lambda: rejoins.append(1))
    producer = _Committing()
    manager = _Guarded(guard, producer)
    guard.fail("app-0-1", RuntimeError("boom"))
    assert guard.failed("app-0-1") and rejoins == [1]
    did = await TransactionManager.commit(manager, {_tp(0): 5, _tp(1): 7})
    assert did is True
    assert [list(c) for c in producer.committed] == [["app-0-0"]]
    assert await TransactionManager.commit(manager, {_tp(1): 8}) is False


async def test_a_commit_that_raises_fails_its_transactions_instead_of_crashing() -> None:
    patches.install()
    rejoins: list[int] = []
    guard = TransactionGuard(lambda: rejoins.append(1))
    manager = _Guarded(guard, _Committing(RuntimeError("fenced")))
    assert await TransactionManager.commit(manager, {_tp(2): 3}) is False
    assert guard.failed("app-0-2") and rejoins == [1]


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
    )
    await asyncio.gather(*(Producer.begin_transaction(faust_producer, "t-1") for _ in range(3)))
    assert len(built) == 1


async def test_offsets_alone_are_committed_in_a_transaction_begun_for_them() -> None:
    patches.install()
    producer = _Committing()
    idle = _TxnProducer(TransactionState.READY)
    busy = _TxnProducer(TransactionState.IN_TRANSACTION)
    producer._transaction_producers.update({"app-0-0": idle, "app-0-1": busy})
    manager = _Guarded(TransactionGuard(lambda: None), producer)
    assert await TransactionManager.commit(manager, {_tp(0): 4, _tp(1): 9}) is True
    assert idle.events == ["begin"] and busy.events == []
    assert [sorted(c) for c in producer.committed] == [["app-0-0", "app-0-1"]]
