"""What a worker's metrics read when Prometheus scrapes, rather than count per event.

Pending approvals (how many, and how long the oldest has waited) and unknown outcomes are read
from the approvals table, consumer lag from the consumer, and the partitions set aside, the
event loop's lag and stalls and the broker's reachability from their watchers: so they stay
right across restarts and rebalances (the table is restored from its changelog, not from
counters). A read that fails during start-up or a rebalance leaves its metric out of that
scrape, never the whole page.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from stream_adapter.core.approvals import instant
from stream_adapter.kafka.connectivity import BrokerStatus
from stream_adapter.stream.engine import Stall, StuckPartition
from stream_adapter.stream.loopwatch import LAG_BUCKETS_S, NOT_A_TOOL, LoopWatch

__all__ = [
    "BrokerCollector",
    "LoopCollector",
    "Pending",
    "ScrapeCollector",
    "StallCollector",
    "Tallies",
    "count_pending",
    "pending_approvals",
    "table_tallies",
    "unknown_outcomes",
]


@dataclass(frozen=True, slots=True)
class Pending:
    """The pending approvals of a worker's table partitions: how many, and the oldest's request
    time (seconds since the epoch; None when there is none)."""

    count: int = 0
    oldest_requested_at: float | None = None


@dataclass(frozen=True, slots=True)
class Tallies:
    """What the gauges read from a worker's table partitions, in one pass."""

    pending: Pending
    unknown: int
    oldest_unknown_at: datetime | None
    """When the oldest unknown outcome became unknown (None when there is none)."""


def table_tallies(values: Iterable[bytes]) -> Tallies:
    """Pending approvals and unknown outcomes among approval records (JSON bytes).

    One pass, and a record that does not contain the word of either state is not parsed: most
    of a table under retention is settled records, and at a million records two full parses
    per scrape held the worker's event loop for seconds.
    """
    count, oldest = 0, None
    unknown, oldest_unknown = 0, None
    for raw in values:
        if b"pending" not in raw and b"unknown" not in raw:
            continue
        try:
            record = orjson.loads(raw)
            state = record.get("state")
        except (orjson.JSONDecodeError, AttributeError):
            continue
        if state == "pending":
            count += 1
            at = instant(str(record.get("requested_at")))
            if at is not None:
                requested = at.timestamp()
                oldest = requested if oldest is None else min(oldest, requested)
        elif state == "unknown":
            unknown += 1
            since = instant(str(record.get("unknown_at")))
            if since is not None and (oldest_unknown is None or since < oldest_unknown):
                oldest_unknown = since
    return Tallies(Pending(count, oldest), unknown, oldest_unknown)


def pending_approvals(values: Iterable[bytes]) -> Pending:
    """Count the approval records (JSON bytes) in state pending and find the oldest request."""
    return table_tallies(values).pending


def count_pending(values: Iterable[bytes]) -> int:
    """How many approval records (JSON bytes) are in state pending."""
    return pending_approvals(values).count


def unknown_outcomes(values: Iterable[bytes], now: datetime | None = None) -> tuple[int, float]:
    """How many approval records (JSON bytes) are in state unknown, and the seconds since the
    oldest of them became unknown (0 when there is none)."""
    tallies = table_tallies(values)
    return tallies.unknown, _age_s(tallies.oldest_unknown_at, now)


def _age_s(since: datetime | None, now: datetime | None = None) -> float:
    if since is None:
        return 0.0
    return max(0.0, ((now or datetime.now(UTC)) - since).total_seconds())


class ScrapeCollector(Collector):
    """Pending approvals (from the local table partitions) and per-partition consumer lag."""

    def __init__(
        self,
        lags: Callable[[], Iterable[tuple[str, int, int]]],
        approvals: Callable[[], Iterable[bytes]],
        stuck: Callable[[], Iterable[StuckPartition]],
        every_s: float,
        unknown_age_limit_s: float = 900.0,
    ) -> None:
        self._unknown_age_limit_s = unknown_age_limit_s
        self._lags = lags
        self._approvals = approvals
        self._stuck = stuck
        self._every_s = every_s
        self._read: tuple[float, Tallies] | None = None

    def describe(self) -> list[Metric]:
        return []  # collected live; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        pending = GaugeMetricFamily(
            "stream_adapter_pending_approvals",
            "Approval records in state pending on this worker's table partitions.",
        )
        oldest = GaugeMetricFamily(
            "stream_adapter_oldest_pending_approval_age_seconds",
            "How long the oldest pending approval on this worker's table partitions has waited "
            "(0 when none is pending).",
        )
        found: Pending | None = self._safe(self._read_pending)
        if found is not None:
            pending.add_metric([], found.count)
            since = found.oldest_requested_at
            oldest.add_metric([], 0.0 if since is None else max(0.0, time.time() - since))
        yield pending
        yield oldest
        lag = GaugeMetricFamily(
            "stream_adapter_consumer_lag_messages",
            "Consumer lag in messages: records after the committed offset, per assigned input "
            "partition.",
            labels=["topic", "partition"],
        )
        for topic, partition, value in self._safe(self._lags) or ():
            lag.add_metric([topic, str(partition)], value)
        yield lag
        stuck = list(self._safe(lambda: list(self._stuck())) or ())
        count = GaugeMetricFamily(
            "stream_adapter_stuck_partitions",
            "Input partitions set aside: their next batch cannot be fetched or decoded.",
        )
        count.add_metric([], len(stuck))
        yield count
        offsets = GaugeMetricFamily(
            "stream_adapter_stuck_partition_offset",
            "The offset a stuck partition stopped at, by topic, partition and error kind.",
            labels=["topic", "partition", "error_kind"],
        )
        for part in stuck:
            offsets.add_metric([part.topic, str(part.partition), part.error_kind], part.offset)
        yield offsets
        unknown = GaugeMetricFamily(
            "stream_adapter_unknown_outcomes",
            "Approved calls whose run left no outcome, waiting for a person to resolve them "
            "(state unknown on this worker's table partitions).",
        )
        oldest = GaugeMetricFamily(
            "stream_adapter_oldest_unknown_outcome_age_seconds",
            "Seconds since the oldest unresolved unknown outcome became unknown (0 when none).",
        )
        tally = self._safe(self._count_unknown)
        if tally is not None:
            unknown.add_metric([], tally[0])
            oldest.add_metric([], tally[1])
        yield unknown
        yield oldest
        yield GaugeMetricFamily(
            "stream_adapter_unknown_outcome_age_limit_seconds",
            "The unknown_outcome_age_limit_s setting: an older unknown outcome raises an alert.",
            value=self._unknown_age_limit_s,
        )

    @staticmethod
    def _safe(read: Callable[[], Any]) -> Any:
        # A scrape during start-up or a rebalance must not fail the whole page.
        try:
            return read()
        except Exception:
            return None

    def _tallies(self) -> Tallies:
        """The table's tallies, read again at most every `every_s` (a scan reads every
        record of the worker's table partitions)."""
        now = time.monotonic()
        if self._read is not None and now - self._read[0] < self._every_s:
            return self._read[1]
        tallies = table_tallies(self._approvals())
        self._read = (now, tallies)
        return tallies

    def _read_pending(self) -> Pending:
        return self._tallies().pending

    def _count_unknown(self) -> tuple[int, float]:
        tallies = self._tallies()
        return tallies.unknown, _age_s(tallies.oldest_unknown_at)


class LoopCollector(Collector):
    """Event-loop lag and stalls (loopwatch.py)."""

    def __init__(self, loop: LoopWatch, label: Callable[[str | None], str]) -> None:
        self._loop = loop
        self._label = label

    def describe(self) -> list[Metric]:
        return []  # collected live

    def collect(self) -> Iterator[Metric]:
        loop = self._loop
        lag = HistogramMetricFamily(
            "stream_adapter_event_loop_lag_seconds",
            "How late the event loop ran a wake-up due every tenth of a second.",
        )
        bounds = [*(str(float(b)) for b in LAG_BUCKETS_S), "+Inf"]
        cumulative, running = [], 0.0
        for bound, count in zip(bounds, list(loop.lag_counts), strict=True):
            running += count
            cumulative.append((bound, running))
        lag.add_metric([], cumulative, sum_value=loop.lag_sum_s)
        yield lag
        held = CounterMetricFamily(
            "stream_adapter_event_loop_stalls",
            "Times the event loop was held past LOOP_STALL_S, by the tool found holding it.",
            labels=["tool"],
        )
        by_label: dict[str, int] = {}
        for tool, count in dict(loop.stalls).items():
            label = tool if tool == NOT_A_TOOL else self._label(tool)
            by_label[label] = by_label.get(label, 0) + count
        for label, count in sorted(by_label.items()):
            held.add_metric([label], count)
        yield held
        outlived = CounterMetricFamily(
            "stream_adapter_event_loop_session_losses",
            "Times the event loop was held past SESSION_TIMEOUT_S (the group drops the worker), "
            "by the tool found holding it.",
            labels=["tool"],
        )
        by_label = {}
        for tool, count in dict(loop.outlived).items():
            label = tool if tool == NOT_A_TOOL else self._label(tool)
            by_label[label] = by_label.get(label, 0) + count
        for label, count in sorted(by_label.items()):
            outlived.add_metric([label], count)
        yield outlived


class StallCollector(Collector):
    """Stalled input partitions (engine/stalls.py), per input topic."""

    def __init__(
        self,
        stalled: Callable[[], Iterable[Stall]],
        stalls_total: Callable[[], Mapping[str, int]],
        topics: tuple[str, ...],
    ) -> None:
        self._stalled = stalled
        self._stalls_total = stalls_total
        self._topics = topics

    def describe(self) -> list[Metric]:
        return []  # collected live

    def collect(self) -> Iterator[Metric]:
        stalled = GaugeMetricFamily(
            "stream_adapter_stalled_partitions",
            "Input partitions with work waiting and no commit progress for PARTITION_STALL_S.",
            labels=["topic"],
        )
        counts = dict.fromkeys(self._topics, 0)
        for stall in ScrapeCollector._safe(lambda: list(self._stalled())) or ():
            counts[stall.topic] = counts.get(stall.topic, 0) + 1
        for topic, count in sorted(counts.items()):
            stalled.add_metric([topic], count)
        yield stalled
        stalls = CounterMetricFamily(
            "stream_adapter_partition_stalls",
            "Input partitions reported stalled, by topic.",
            labels=["topic"],
        )
        totals = dict.fromkeys(self._topics, 0) | dict(self._stalls_total())
        for topic, count in sorted(totals.items()):
            stalls.add_metric([topic], count)
        yield stalls


class BrokerCollector(Collector):
    """The broker's reachability as this worker sees it (connectivity.BrokerWatch)."""

    def __init__(self, status: Callable[[], BrokerStatus]) -> None:
        self._status = status

    def describe(self) -> list[Metric]:
        return []  # collected live

    def collect(self) -> Iterator[Metric]:
        status = self._status()
        yield GaugeMetricFamily(
            "stream_adapter_broker_up",
            "1 while the worker reaches a bootstrap server, 0 during an outage.",
            value=1 if status.reachable else 0,
        )
        yield GaugeMetricFamily(
            "stream_adapter_broker_outage_seconds",
            "How long the current broker outage has lasted (0 while reachable).",
            value=status.outage_s,
        )
        yield CounterMetricFamily(
            "stream_adapter_broker_outages",
            "Broker outages since the worker started.",
            value=status.outages,
        )
        yield CounterMetricFamily(
            "stream_adapter_kafka_client_lines_suppressed",
            "Kafka client log lines about unreachable brokers held back (counted in summaries).",
            value=status.suppressed,
        )
