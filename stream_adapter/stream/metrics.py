"""Prometheus metrics of one worker: what the flows count, on a registry that also carries what
is read at scrape time (scrape.py).

The hot path only increments label children bound once per (tool, status) and cached in a
dict, so a call costs a few dict look-ups and lock-free-ish increments, never an await.
Pending approvals (how many, and how long the oldest has waited) and consumer lag are not
tracked per event: the collectors of scrape.py read them when Prometheus scrapes. The
process's CPU, memory and file descriptors, and a build-info gauge naming the versions it runs,
are on the same registry. The table readers (`table_tallies`, `count_pending`, ...) are
importable from here as well as from scrape.py.

Label values are bounded: a tool name becomes a label only when the executor knows it (an
unknown name sent by a producer becomes ``"<unknown>"``), and error kinds are the six of §6.
"""

from __future__ import annotations

import platform
import time
from bisect import bisect_left
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from importlib import metadata
from typing import Any

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
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from stream_adapter.core.approvals import instant
from stream_adapter.kafka.connectivity import BrokerStatus
from stream_adapter.stream.engine import Stall, StuckPartition
from stream_adapter.stream.loopwatch import LoopWatch
from stream_adapter.stream.scrape import (
    BrokerCollector,
    LoopCollector,
    Pending,
    ScrapeCollector,
    StallCollector,
    Tallies,
    count_pending,
    pending_approvals,
    table_tallies,
    unknown_outcomes,
)

__all__ = [
    "LATENCY_BUCKETS",
    "SIGNATURES",
    "UNKNOWN_TOOL",
    "WAIT_BUCKETS",
    "Metrics",
    "Pending",
    "Tallies",
    "count_pending",
    "pending_approvals",
    "table_tallies",
    "unknown_outcomes",
    "versions",
]

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
            ScrapeCollector(lags, approvals, stuck, pending_every_s, unknown_age_limit_s)
        )

    def watch_loop(self, loop: LoopWatch) -> None:
        """At scrape time, read the event loop's lag and stalls from loop (loopwatch.py)."""
        self.registry.register(LoopCollector(loop, self.label))

    def watch_broker(self, status: Callable[[], BrokerStatus]) -> None:
        """At scrape time, read the broker's reachability from status() (connectivity.py)."""
        self.registry.register(BrokerCollector(status))

    def watch_stalls(
        self,
        stalled: Callable[[], Iterable[Stall]],
        stalls_total: Callable[[], Mapping[str, int]],
        topics: Iterable[str],
    ) -> None:
        """At scrape time, read the stalled input partitions (of topics) from stalled(), and
        how many were reported per topic from stalls_total()."""
        self.registry.register(StallCollector(stalled, stalls_total, tuple(topics)))


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
