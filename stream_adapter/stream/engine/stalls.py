"""The stall check: an input partition with work waiting whose commits do not move.

Faust's own detector judges partitions by the progress of its streams. The routed topics
never pass through one, and a table's changelog is not read once recovered, so on a healthy
idle worker it reported partitions it could not account for every 1.25 s, each with a
12-line explanation. It is switched off (FastConsumer.verify_all_partitions_active), and
this check takes its place, on the routed topics only:

- work: records fetched but not yet handed on (position < highwater), or handed on and not
  yet acked;
- progress: the partition's committed offset moved.

A partition with work and no progress for ``stall_s`` seconds is stalled: one WARNING line
when it becomes so, one INFO line when it moves again, and `stalled()` for the metrics. An
idle partition has no work (trailing transaction markers leave position at the highwater),
so it is never stalled, however long it idles.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stream_adapter.core import logs

CHECK_EVERY_MAX_S = 5.0


@dataclass(frozen=True, slots=True)
class Stall:
    """A stalled input partition: work waiting for `stalled_s` seconds, commits not moving."""

    topic: str
    partition: int
    committed: int | None
    stalled_s: float


@dataclass(slots=True)
class _Progress:
    committed: int | None
    since: float
    reported: bool = False


class StallWatch:
    """Checks the consumer's routed partitions every few seconds while the app runs."""

    def __init__(
        self,
        consumer: Callable[[], Any],
        topics: Callable[[], frozenset[str]],
        stall_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if stall_s <= 0:
            raise ValueError("stall_s must be positive")
        self._consumer = consumer
        self._topics = topics
        self.stall_s = stall_s
        self._clock = clock
        self._progress: dict[Any, _Progress] = {}
        self.stalls_total: dict[str, int] = {}
        """Stalls reported since start, by topic."""
        self._task: asyncio.Task[None] | None = None

    @property
    def every_s(self) -> float:
        return min(self.stall_s / 4, CHECK_EVERY_MAX_S)

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.every_s)
            try:
                self.check()
            except Exception as exc:  # a check must never take the worker down
                logs.event(logs.DEBUG, "stall check failed", error_kind=type(exc).__name__)

    def check(self) -> list[Stall]:
        """One round: update each routed partition's progress; report what became stalled."""
        consumer = self._consumer()
        now = self._clock()
        if consumer is None or getattr(consumer.app, "rebalancing", False):
            self._progress.clear()  # a rebalance is progress of its own: count afresh after
            return []
        topics = self._topics()
        seen: set[Any] = set()
        for tp, committed, work in consumer.partition_work(topics):
            seen.add(tp)
            state = self._progress.get(tp)
            if state is None or not work or state.committed != committed:
                if state is not None and state.reported:
                    logs.event(
                        logs.INFO,
                        "partition progressing again",
                        topic=tp.topic,
                        partition=tp.partition,
                        offset=committed,
                    )
                self._progress[tp] = _Progress(committed, now)
                continue
            if not state.reported and now - state.since >= self.stall_s:
                state.reported = True
                self.stalls_total[tp.topic] = self.stalls_total.get(tp.topic, 0) + 1
                logs.event(
                    logs.WARNING,
                    "partition stalled: work waiting, no commit progress",
                    topic=tp.topic,
                    partition=tp.partition,
                    offset=committed,
                    held_s=round(now - state.since, 1),
                )
        for gone in set(self._progress) - seen:
            del self._progress[gone]
        return self.stalled(now)

    def stalled(self, now: float | None = None) -> list[Stall]:
        """The partitions stalled at the last check."""
        moment = self._clock() if now is None else now
        return [
            Stall(tp.topic, tp.partition, state.committed, moment - state.since)
            for tp, state in sorted(self._progress.items())
            if state.reported
        ]
