"""A transactional producer in a fatal state is replaced before Faust begins again."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from aiokafka.producer.transaction_manager import TransactionState
from faust.transport.drivers.aiokafka import Producer

from stream_adapter.stream.transactions import replace_fatal_producers


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
    replace_fatal_producers()
    replace_fatal_producers()  # idempotent: wrapped once
    fatal, fresh = _TxnProducer(TransactionState.FATAL_ERROR), _TxnProducer(TransactionState.READY)
    faust_producer = _faust_producer(fatal, fresh)
    await Producer.begin_transaction(faust_producer, "t-0")
    assert fatal.events == ["stop"]
    assert fresh.events == ["start", "begin"]
    assert faust_producer._transaction_producers["t-0"] is fresh


async def test_a_healthy_producer_is_kept() -> None:
    replace_fatal_producers()
    ready, unused = _TxnProducer(TransactionState.READY), _TxnProducer(TransactionState.READY)
    faust_producer = _faust_producer(ready, unused)
    faust_producer._trn_locks["t-0"] = asyncio.Lock()
    await Producer.begin_transaction(faust_producer, "t-0")
    assert ready.events == ["begin"] and unused.events == []
