"""Partitions the worker cannot fetch or decode: set aside, reported, tried again.

aiokafka raises a batch it cannot decode (a codec it lacks, a corrupt batch) or a partition's
fetch error (an ACL that refuses one topic) out of the consumer's `getmany` for every
partition at once, and the records of other partitions drained in the same call are dropped
with it; in Faust that error stops the worker, which meets the same batch again after a
restart. Here the error stays with its partition: the records before the bad batch are handed
on, the partition is set aside at the bad offset (its committed offset cannot pass it, so
nothing is lost), reported in one log line, on /metrics and on /health, and fetched again
every `RETRY_S` (a granted ACL or a fixed install then needs no restart). The other
partitions go on being served. docs/operations.md says how an operator moves past one.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any

from aiokafka.consumer.fetcher import FetchError, FetchResult

from stream_adapter.core import logs

RETRY_S = 60.0
"""How long a stuck partition is left alone before it is fetched again."""

_GUARDED = "_stream_adapter_guarded"


@dataclass(frozen=True, slots=True)
class StuckPartition:
    """A partition set aside: where it stopped and why (an error class name, never text)."""

    topic: str
    partition: int
    offset: int
    error_kind: str
    since: float
    """Wall-clock time (epoch seconds) it was first set aside."""


class StuckPartitions:
    """The partitions set aside now, by topic partition."""

    def __init__(self, retry_s: float = RETRY_S) -> None:
        self.retry_s = retry_s
        self._stuck: dict[Any, StuckPartition] = {}
        self._retry_at: dict[Any, float] = {}
        self._found: dict[Any, tuple[int, BaseException]] = {}

    def __iter__(self) -> Iterator[StuckPartition]:
        return iter(sorted(self._stuck.values(), key=lambda s: (s.topic, s.partition)))

    def __len__(self) -> int:
        return len(self._stuck)

    def resting(self) -> set[Any]:
        """Stuck partitions not due for another try yet: leave them out of fetches."""
        now = time.monotonic()
        return {tp for tp, at in self._retry_at.items() if at > now}

    def guard(self, records: MutableMapping[Any, Any], wanted: set[Any] | None) -> None:
        """Prepare the fetcher's buffered results of wanted partitions (None: all) so an error
        stays with its partition: decoding stops before the bad batch and is noted (`settle`
        sets the partition aside), and a fetch error is taken out and noted the same way."""
        for tp, result in list(records.items()):
            if wanted is not None and tp not in wanted:
                continue
            if type(result) is FetchError:
                del records[tp]  # what fetched_records would do before raising it
                self._found[tp] = (-1, result._error)
            elif type(result) is FetchResult:
                batches = result._partition_records
                if batches is not None and not getattr(batches, _GUARDED, False):
                    inner = batches._records_iterator
                    batches._records_iterator = self._contained(tp, batches, inner)
                    setattr(batches, _GUARDED, True)

    def _contained(self, tp: Any, batches: Any, inner: Iterator[Any]) -> Iterator[Any]:
        """The records of inner (batches' own iterator) until one cannot be decoded, which is
        noted instead."""
        try:
            yield from inner
        except Exception as exc:
            # Nothing past the last record handed on was consumed: the partition's position
            # stays at the bad batch, and so does its committed offset.
            self._found[tp] = (batches.next_fetch_offset, exc)

    def settle(self, position_of: Any) -> None:
        """Set aside what `guard` noted since the last call; `position_of(tp)` gives a fetch
        error's offset."""
        found, self._found = self._found, {}
        for tp, (offset, exc) in found.items():
            at = offset if offset >= 0 else position_of(tp)
            self.set_aside(tp, at, exc)

    def set_aside(self, tp: Any, offset: int, exc: BaseException) -> None:
        """Note tp as stuck at offset, and say so loudly (once per try)."""
        kind = type(exc).__name__
        before = self._stuck.get(tp)
        since = before.since if before is not None and before.offset == offset else time.time()
        self._stuck[tp] = StuckPartition(tp.topic, tp.partition, offset, kind, since)
        self._retry_at[tp] = time.monotonic() + self.retry_s
        logs.event(
            logs.ERROR,
            "partition stuck: cannot fetch or decode its next batch; other partitions go on",
            topic=tp.topic,
            partition=tp.partition,
            offset=offset,
            error_kind=kind,
            retry_in_s=int(self.retry_s),
        )
        logs.log.debug("stuck partition cause", exc_info=exc)

    def served(self, tps: Any) -> None:
        """tps handed on records again: those that were stuck are no longer."""
        for tp in tps:
            if self._stuck.pop(tp, None) is not None:
                self._retry_at.pop(tp, None)
                logs.event(
                    logs.WARNING, "partition served again", topic=tp.topic, partition=tp.partition
                )

    def forget(self, tps: Any) -> None:
        """tps are no longer assigned here (their next owner meets the batch afresh)."""
        for tp in tps:
            self._stuck.pop(tp, None)
            self._retry_at.pop(tp, None)
            self._found.pop(tp, None)
