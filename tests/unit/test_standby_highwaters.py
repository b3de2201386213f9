"""Exactly once, recovery waits for open transactions on active changelog partitions only:
standby highwaters are the last stable offsets as they are (engine/recovery.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from stream_adapter.stream.engine import recovery


class _Consumer:
    """An aiokafka consumer whose end offsets are the last stable ones; nothing else."""

    def __init__(self) -> None:
        self.asked: list[list[Any]] = []

    async def end_offsets(self, partitions: list[Any]) -> dict[Any, int]:
        self.asked.append(list(partitions))
        return {tp: 7 for tp in partitions}


async def test_standby_highwaters_do_not_wait(monkeypatch: Any) -> None:
    waited: list[Any] = []

    async def stable_highwaters(consumer: Any, partitions: list[Any]) -> dict[Any, int]:
        waited.append(partitions)
        return {tp: 9 for tp in partitions}

    async def faust_highwaters(thread: Any, partitions: list[Any]) -> dict[Any, int]:
        raise AssertionError("at least once only")

    monkeypatch.setattr(recovery, "stable_highwaters", stable_highwaters)
    aiokafka_consumer = _Consumer()
    thread = SimpleNamespace(
        consumer=SimpleNamespace(in_transaction=True), _ensure_consumer=lambda: aiokafka_consumer
    )
    highwaters = recovery.broker_highwaters(faust_highwaters)

    async def faust_build(
        _self: Any, _consumer: Any, tps: Any, destination: dict[Any, int], _title: str
    ) -> None:
        destination.update(await highwaters(thread, sorted(tps)))

    build = recovery.standbys_without_waiting(faust_build)
    standby: dict[Any, int] = {}
    await build(None, None, {"c-1"}, standby, "standby")
    assert standby == {"c-1": 7} and not waited
    active: dict[Any, int] = {}
    await build(None, None, {"c-0"}, active, "active")
    assert active == {"c-0": 9} and waited == [["c-0"]]
