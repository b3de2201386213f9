"""A long fetch round is handled in slices: at the end of each, the routes send what they
batched, so the replies of a backlog's first fetch (tens of thousands of records) go out as
they are made, not all after the round's last record."""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import pytest
from faust.types import TP

from stream_adapter.stream.engine import consumer as consumer_module
from stream_adapter.stream.engine.consumer import ROUND_SLICE_S, FastConsumer

TOPIC = "calls"


class _Dispatching:
    """What `_dispatch` reads of its consumer: one routed topic, nothing paused or stopped."""

    _dispatch = FastConsumer._dispatch
    _end_slice = FastConsumer._end_slice

    def __init__(self, events: list[Any]) -> None:
        async def handler(message: Any) -> None:
            events.append(message.offset)

        async def flush() -> None:
            events.append("flush")

        self.handlers = {TOPIC: handler}
        self.flushes = [flush]
        self.callback = None
        self.restore = None
        self.should_stop = False
        self.flow_active = True
        self.app = SimpleNamespace(
            consumer_generation_id=1,
            monitor=SimpleNamespace(track_tp_end_offset=lambda tp, offset: None),
        )
        self._read_offset: defaultdict[Any, int | None] = defaultdict(lambda: None)
        self._buffered_partitions: set[Any] = set()
        self._expected: dict[Any, int] = {}

    def highwater(self, tp: Any) -> int:
        return 0

    def _to_message(self, tp: Any, record: Any) -> Any:
        return record


def _round(count: int) -> dict[Any, list[Any]]:
    tp = TP(TOPIC, 0)
    return {tp: [SimpleNamespace(topic=TOPIC, offset=n) for n in range(count)]}


async def test_a_long_round_sends_what_each_slice_batched(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]

    def perf_counter() -> float:  # every record's work takes a fifth of a slice
        now[0] += ROUND_SLICE_S / 5
        return now[0]

    monkeypatch.setattr(consumer_module, "time", SimpleNamespace(perf_counter=perf_counter))
    events: list[Any] = []
    await _Dispatching(events)._dispatch(_round(20), None)
    assert [e for e in events if e != "flush"] == list(range(20))  # each record once, in order
    flushed_after = [events[i - 1] for i, e in enumerate(events) if e == "flush"]
    assert len(flushed_after) >= 3 and flushed_after[0] < 10  # early, and again and again


async def test_a_quick_round_leaves_the_sending_to_its_end(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(consumer_module, "time", SimpleNamespace(perf_counter=lambda: 0.0))
    events: list[Any] = []
    await _Dispatching(events)._dispatch(_round(20), None)
    assert events == list(range(20))  # the round's end (the fetch loop) flushes it


async def test_records_taken_on_the_spot_and_a_flow_stopped_by_an_awaited_one() -> None:
    """A handler may finish a record on the spot (it returns None, nothing awaited); when it
    awaits instead, other tasks may have stopped the flow, and the rest is fetched again."""
    events: list[Any] = []
    dispatching = _Dispatching(events)
    refetched: list[dict[Any, int]] = []

    async def stop_the_flow() -> None:
        dispatching.flow_active = False  # a rebalance began while the job was scheduled

    def handler(message: Any) -> Any:
        events.append(message.offset)
        return stop_the_flow() if message.offset == 5 else None

    async def refetch(offsets: dict[Any, int]) -> None:
        refetched.append(offsets)

    dispatching.handlers = {TOPIC: handler}
    dispatching._refetch = refetch  # type: ignore[attr-defined]
    await dispatching._dispatch(_round(20), None)
    assert events == list(range(6))
    assert refetched == [{TP(TOPIC, 0): 6}]
