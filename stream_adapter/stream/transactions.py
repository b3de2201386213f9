"""A partition's transactional producer in a fatal state is replaced before it begins again.

faust-streaming 0.15.3 (`Producer.begin_transaction`) keeps one aiokafka producer per
transactional id and logs and swallows any failure to begin. A producer that hit a fatal
error (aiokafka's FATAL_ERROR state, seen after a rebalance or a broker restart) can never
begin again, so every later begin fails quietly and every send to the partition raises
`IllegalOperation: not in transaction` until the worker restarts (docs/chaos.md). Before
beginning, such a producer is stopped and dropped, so Faust's own code creates a new one.
"""

from __future__ import annotations

from typing import Any

from aiokafka.producer.transaction_manager import TransactionState

_PATCHED = "_stream_adapter_fatal_producers"


def replace_fatal_producers() -> None:
    """Patch Faust's begin_transaction to start over from a fatal producer; idempotent."""
    from faust.transport.drivers.aiokafka import Producer

    if getattr(Producer, _PATCHED, False):
        return
    begin = Producer.begin_transaction

    async def begin_transaction(self: Any, transactional_id: str) -> None:
        current = self._transaction_producers.get(transactional_id)
        manager = getattr(current, "_txn_manager", None)
        if manager is not None and manager.state == TransactionState.FATAL_ERROR:
            self._transaction_producers.pop(transactional_id, None)
            await current.stop()
        await begin(self, transactional_id)

    Producer.begin_transaction = begin_transaction  # type: ignore[method-assign]
    setattr(Producer, _PATCHED, True)
