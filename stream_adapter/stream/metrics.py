"""Prometheus metrics of one worker: what the flows count, and what is read at scrape time.

The hot path only increments label children bound once per (tool, status) and cached in a
dict, so a call costs a few dict look-ups and lock-free-ish increments, never an await.
Pending approvals (how many, and how long the oldest has waited) and consumer lag are not
tracked per event: a collector reads them from the approvals table and the consumer when
Prometheus scrapes, so they stay right across restarts and rebalances (the table is restored
from its changelog, not from counters). The process's CPU, memory and file descriptors, and a
build-info gauge naming the versions it runs, are on the same registry.

Label values are bounded: a tool name becomes a label only when the executor knows it (an
unknown name sent by a producer becomes ``"<unknown>"``), and error kinds are the six of §6.
"""

from __future__ import annotations

import platform
import time
from bisect import bisect_left
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

import orjson
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from stream_adapter.approvals import instant
from stream_adapter.connectivity import BrokerStatus
from stream_adapter.loopwatch import LAG_BUCKETS_S, NOT_A_TOOL, LoopWatch
from stream_adapter.stream.engine import Stall, StuckPartition

UNKNOWN_TOOL = "<unknown>"
"""The tool label of replies for envelopes without a known tool (bounded cardinality)."""

LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
WAIT_BUCKETS = (1, 5, 15, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 86400)
SIGNATURES = ("signed", "unsigned", "invalid", "unchecked")
"""How a decision read by the worker was signed: with a valid signature; with none; with a wrong
one or an unknown key; or with one nobody checked (no decision keys configured)."""


def versions() -> dict[str, str]:
    """The versions a worker runs, for the build-info gauge."""

    def of(package: str) -> str:
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            return "unknown"

    return {
        "version": of("stream-adapter"),
        "python": platform.python_version(),
        "faust": of("faust-streaming"),
        "aiokafka": of("aiokafka"),
    }


class Metrics:
    """The worker's instruments on a registry of their own (one worker, one registry)."""

    def __init__(self, tools: Collection[str] = (), *, approval_age_limit_s: float = 0) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._known = frozenset(tools)
        r = self.registry
        ProcessCollector(registry=r)  # process_cpu_seconds_total, _resident_memory_bytes, ...
        PlatformCollector(registry=r)  # python_info
        GCCollector(registry=r)  # python_gc_*
        Info(
            "stream_adapter_build",
            "The versions this worker runs (stream-adapter, Python, faust-streaming, aiokafka).",
            registry=r,
        ).info(versions())
        if approval_age_limit_s > 0:
            Gauge(
                "stream_adapter_pending_approval_age_limit_seconds",
                "How long a call may wait for a reviewer before the approval-age alert fires "
                "(the pending_approval_age_limit_s setting).",
                registry=r,
            ).set(approval_age_limit_s)
        self.calls = Counter(
            "stream_adapter_calls",
            "Replies written, by tool and status (ok, error, pending_approval, already_done).",
            ["tool", "status"],
            registry=r,
        )
        self.latency = _LoopHistogram(
            "stream_adapter_call_seconds",
            "Wall time of a tool run, retries and backoff included.",
            "tool",
            LATENCY_BUCKETS,
        )
        r.register(self.latency)
        self.in_flight = Gauge(
            "stream_adapter_calls_in_flight", "Tool runs in progress now.", registry=r
        )
        self._running = 0  # read at scrape time: a gauge's lock cost more than the call
        self.in_flight.set_function(lambda: self._running)
        self.retries = Counter(
            "stream_adapter_retries",
            "Retries of retryable failures, by tool.",
            ["tool"],
            registry=r,
        )
        self.dead_letters = Counter(
            "stream_adapter_dead_letters",
            "Messages copied to the dead-letter topic, by source topic and error kind.",
            ["topic", "kind"],
            registry=r,
        )
        self.approval_wait = Histogram(
            "stream_adapter_approval_wait_seconds",
            "Time from parking a call to its reviewer's first decision.",
            ["tool", "verdict"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        decisions = Counter(
            "stream_adapter_decisions",
            "Decisions read from the decisions topic, by signature: signed (valid), unsigned, "
            "invalid (wrong signature or unknown key), unchecked (no decision keys configured).",
            ["signature"],
            registry=r,
        )
        self._decisions = {s: decisions.labels(s) for s in SIGNATURES}
        self._calls: dict[tuple[str | None, str], Any] = {}
        self._latency: dict[str, list[float]] = {}
        self._retries: dict[str, Any] = {}

    def label(self, tool: str | None) -> str:
        """The tool label: the name when the executor knows it, else UNKNOWN_TOOL."""
        return tool if tool is not None and tool in self._known else UNKNOWN_TOOL

    def replied(self, tool: str | None, status: str, count: int = 1) -> None:
        """Count replies written."""
        child = self._calls.get((tool, status))
        if child is None:
            label = self.label(tool)
            child = self.calls.labels(label, status)
            if label != UNKNOWN_TOOL:  # names sent by producers must not grow the cache
                self._calls[(tool, status)] = child
        child.inc(count)

    def started(self) -> float:
        """A tool run begins: one more in flight; returns the start time for `finished`."""
        self._running += 1
        return time.perf_counter()

    def finished(self, tool: str, started: float) -> None:
        """A tool run ended (any outcome): one fewer in flight, its latency observed."""
        self._running -= 1
        self.observe(tool, time.perf_counter() - started)

    def observe(self, tool: str, seconds: float) -> None:
        """One tool run's wall time."""
        cells = self._latency.get(tool)
        if cells is None:
            cells = self._latency[tool] = self.latency.cells(self.label(tool))
        self.latency.add(cells, seconds)

    def retried(self, tool: str) -> None:
        child = self._retries.get(tool)
        if child is None:
            child = self._retries[tool] = self.retries.labels(self.label(tool))
        child.inc()

    def dead_lettered(self, topic: str, kind: str) -> None:
        self.dead_letters.labels(topic, kind).inc()

    def decision_read(self, signature: str) -> None:
        """Count a decision by how it was signed (one of SIGNATURES)."""
        self._decisions[signature].inc()

    def decided(self, tool: str, approved: bool, requested_at: str, decided_at: str | None) -> None:
        """Observe how long a parked call waited for its (first) decision."""
        if decided_at is None:
            return
        decided, requested = instant(decided_at), instant(requested_at)
        if decided is None or requested is None:
            return
        waited = (decided - requested).total_seconds()
        verdict = "approved" if approved else "denied"
        self.approval_wait.labels(self.label(tool), verdict).observe(max(0.0, waited))

    def watch(
        self,
        lags: Callable[[], Iterable[tuple[str, int, int]]],
        approvals: Callable[[], Iterable[bytes]],
        *,
        stuck: Callable[[], Iterable[StuckPartition]] = tuple,
        pending_every_s: float = 10.0,
        unknown_age_limit_s: float = 900.0,
    ) -> None:
        """At scrape time, read consumer lag from lags() ((topic, partition, lag) of each
        assigned input partition), pending approvals and unknown outcomes from approvals()
        (record bytes) and the partitions set aside from stuck(); unknown_age_limit_s is
        exported for the alert rule."""
        self.registry.register(
            _ScrapeCollector(lags, approvals, stuck, pending_every_s, unknown_age_limit_s)
        )

    def watch_loop(self, loop: LoopWatch) -> None:
        """At scrape time, read the event loop's lag and stalls from loop (loopwatch.py)."""
        self.registry.register(_LoopCollector(loop, self.label))

    def watch_broker(self, status: Callable[[], BrokerStatus]) -> None:
        """At scrape time, read the broker's reachability from status() (connectivity.py)."""
        self.registry.register(_BrokerCollector(status))

    def watch_stalls(
        self,
        stalled: Callable[[], Iterable[Stall]],
        stalls_total: Callable[[], Mapping[str, int]],
        topics: Iterable[str],
    ) -> None:
        """At scrape time, read the stalled input partitions (of topics) from stalled(), and
        how many were reported per topic from stalls_total()."""
        self.registry.register(_StallCollector(stalled, stalls_total, tuple(topics)))


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


class _LoopHistogram(Collector):
    """A histogram with one label, observed from the event loop only, so without locks.

    prometheus_client's Histogram takes two locks per observation, a tenth of an inline
    call's cost. Each label value owns a list: one count per bucket (the last one past the
    largest bound), then the sum; `add` observes into it in place.
    """

    def __init__(self, name: str, documentation: str, label: str, buckets: tuple[float, ...]):
        self._name = name
        self._documentation = documentation
        self._label = label
        self._buckets = buckets
        self._cells: dict[str, list[float]] = {}

    def cells(self, value: str) -> list[float]:
        """The counts and sum of one label value (created at zero)."""
        return self._cells.setdefault(value, [0] * (len(self._buckets) + 1) + [0.0])

    def add(self, cells: list[float], seconds: float) -> None:
        """Observe one value into the cells of its label value."""
        cells[bisect_left(self._buckets, seconds)] += 1
        cells[-1] += seconds

    def describe(self) -> list[Metric]:
        return [HistogramMetricFamily(self._name, self._documentation, labels=[self._label])]

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self._name, self._documentation, labels=[self._label])
        bounds = [*(str(float(b)) for b in self._buckets), "+Inf"]
        for value, cells in list(self._cells.items()):
            counts, total = cells[:-1], cells[-1]
            cumulative, running = [], 0.0
            for bound, count in zip(bounds, counts, strict=True):
                running += count
                cumulative.append((bound, running))
            family.add_metric([value], cumulative, sum_value=total)
        yield family


class _ScrapeCollector(Collector):
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


class _LoopCollector(Collector):
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


class _StallCollector(Collector):
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
        for stall in _ScrapeCollector._safe(lambda: list(self._stalled())) or ():
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


class _BrokerCollector(Collector):
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
