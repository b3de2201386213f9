"""The engine's stall check on a stand-in consumer: idle partitions are never stalled, work
without commit progress is reported once, progress ends the stall, a rebalance starts afresh."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pytest

from stream_adapter.stream.engine.stalls import StallWatch


class TP(NamedTuple):
    topic: str
    partition: int


@dataclass
class App:
    rebalancing: bool = False


@dataclass
class Consumer:
    """partition_work as FastConsumer gives it: (tp, committed, has work)."""

    app: App = field(default_factory=App)
    work: dict[TP, tuple[int | None, bool]] = field(default_factory=dict)

    def partition_work(self, topics: frozenset[str]) -> list[tuple[Any, int | None, bool]]:
        return [(tp, c, w) for tp, (c, w) in sorted(self.work.items()) if tp.topic in topics]


CALLS = TP("calls", 0)
OTHER = TP("calls", 1)


@pytest.fixture
def clock() -> list[float]:
    return [100.0]


@pytest.fixture
def consumer() -> Consumer:
    return Consumer()


@pytest.fixture
def watch(consumer: Consumer, clock: list[float]) -> StallWatch:
    return StallWatch(lambda: consumer, lambda: frozenset({"calls"}), 10.0, lambda: clock[0])


def stalled_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "partition stalled" in r.getMessage()]


def test_idle_partitions_are_never_stalled(
    watch: StallWatch, consumer: Consumer, clock: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    consumer.work = {CALLS: (41, False), OTHER: (None, False)}
    for _ in range(100):
        clock[0] += 60
        assert watch.check() == []
    assert not stalled_lines(caplog) and watch.stalls_total == {}


def test_work_without_progress_is_one_line_until_it_moves(
    watch: StallWatch, consumer: Consumer, clock: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="stream_adapter")
    consumer.work = {CALLS: (41, True), OTHER: (7, False)}
    watch.check()
    clock[0] += 9.9
    assert watch.check() == []
    clock[0] += 0.2
    (stall,) = watch.check()
    assert (stall.topic, stall.partition, stall.committed) == ("calls", 0, 41)
    for _ in range(20):
        clock[0] += 5
        assert len(watch.check()) == 1
    (line,) = stalled_lines(caplog)
    assert line.levelno == logging.WARNING and line.partition == 0  # type: ignore[attr-defined]
    assert watch.stalls_total == {"calls": 1}
    consumer.work[CALLS] = (42, True)  # a commit: progress, though work remains
    clock[0] += 5
    assert watch.check() == []
    assert any("progressing again" in r.getMessage() for r in caplog.records)
    clock[0] += 10.1
    assert len(watch.check()) == 1 and watch.stalls_total == {"calls": 2}


def test_a_rebalance_starts_the_count_afresh(
    watch: StallWatch, consumer: Consumer, clock: list[float]
) -> None:
    consumer.work = {CALLS: (41, True)}
    watch.check()
    clock[0] += 8
    consumer.app.rebalancing = True
    assert watch.check() == []
    consumer.app.rebalancing = False
    watch.check()
    clock[0] += 8
    assert watch.check() == []  # 16 s since the first look, 8 since the rebalance
