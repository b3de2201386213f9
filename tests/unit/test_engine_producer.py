"""Every producer the worker builds is idempotent with acks=all, at either guarantee."""

from __future__ import annotations

from typing import Any

import pytest

from stream_adapter.stream.engine import App


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
async def test_worker_producers_are_idempotent_with_acks_all(guarantee: str) -> None:
    app = App(
        f"idempotent-{guarantee}", broker="kafka://127.0.0.1:1", processing_guarantee=guarantee
    )
    producer: Any = app.producer
    built = [producer._new_producer()]
    if guarantee == "exactly_once":
        built.append(producer._new_producer(transactional_id="idempotent-0-0"))
    for client in built:
        # aiokafka keeps a transaction manager (producer id, sequence numbers) only when
        # idempotent, and hands its sender the acks it was given (-1 for "all").
        assert client._txn_manager is not None
        assert client._sender._acks == -1
        await client.stop()
