"""The consumer's commit timer counts the interval from the start of each commit: a commit
that outlasts the interval is followed by the next one after a short gap, not after another
whole interval (Faust's timer sleeps the interval after every commit ends)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from stream_adapter.stream.engine import consumer as consumer_module
from stream_adapter.stream.engine.consumer import COMMIT_GAP_S, FastConsumer


class _Clocked:
    """What the timer reads of its consumer, on a clock that moves only when told."""

    commit_interval = 0.1

    def __init__(self, now: list[float], commit_durations_s: list[float]) -> None:
        self._now = now
        self._durations = commit_durations_s
        self.should_stop = False
        self.sleeps: list[float] = []
        self.commit_starts: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self._now[0] += seconds

    async def commit(self) -> bool:
        self.commit_starts.append(self._now[0])
        self._now[0] += self._durations.pop(0)
        self.should_stop = not self._durations
        return True


def test_the_next_commit_starts_one_interval_after_the_last_one_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [0.0]
    monkeypatch.setattr(consumer_module, "time", SimpleNamespace(monotonic=lambda: now[0]))
    consumer = _Clocked(now, [0.03, 0.5, 0.0])
    timer = FastConsumer._commit_handler.fun(consumer)
    with pytest.raises(StopIteration):
        timer.send(None)  # nothing in it awaits anything real: it runs to its end
    # A quick commit: the rest of the interval. A slow one: only the gap, not a whole interval.
    assert consumer.commit_starts == pytest.approx([0.1, 0.2, 0.7 + COMMIT_GAP_S])
    assert consumer.sleeps == pytest.approx([0.1, 0.07, COMMIT_GAP_S, 0.1])
