"""Measuring one contender: pre-produce a backlog, time its replies, then paced latency runs.

A backlog's throughput runs from the contender's first reply reaching the log (the broker's
append time: replies topics use `LogAppendTime`) to its last reply becoming visible to the
reader. The first append follows the contender's first fetch by the work done before its
first send: one call's (Quix Streams), one slice of a round, at most 50 ms (the worker), or
one `getmany` batch of up to 5,000 calls (the aiokafka loop, which this favours by about
0.2 s). The last visibility includes the commit of contenders that publish in transactions,
so one that answers in bursts is not measured from its first burst.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson
from aiokafka.admin import NewTopic

from stream_adapter.kafka import clients as kafka_clients
from stream_adapter.kafka.partitions import partition_for
from stream_adapter.settings import Settings

PAD = "x" * 120  # brings an echo envelope to about 200 bytes
MIN_SPAN_S = 0.1
"""A backlog answered faster than this (a tiny test run, often one fetch) counts as this long."""


@dataclass(frozen=True, slots=True)
class Latency:
    """Call-to-reply latency at one paced rate: from produce time to reply arrival."""

    rate: float
    p50_ms: float
    p99_ms: float
    max_ms: float


@dataclass(frozen=True, slots=True)
class Result:
    """One contender's figures; `latency` holds one entry per paced rate, lowest first."""

    name: str
    calls: int
    calls_per_s: float
    latency: tuple[Latency, ...]
    peak_rss_mb: float
    ideal_per_s: float | None = None
    load_1m: float = 0.0
    """The machine's one-minute load average when the backlog was done (its conditions)."""

    @property
    def headline(self) -> Latency | None:
        """The latency at the highest paced rate (the table's and the targets' figure)."""
        return self.latency[-1] if self.latency else None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def load_settings(bootstrap: str) -> Settings:
    """How the bench's own clients connect: the environment's settings at bootstrap. Its
    load comes uncompressed, like the backlogs of earlier runs."""
    return Settings().with_changes(broker=bootstrap, compression="none")


@dataclass(frozen=True, slots=True)
class Contender:
    """How to start one contender, against which topics."""

    name: str
    cmd: list[str]
    env: dict[str, str]
    calls_topic: str
    replies_topic: str
    read_committed: bool = False


LOG_APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}
"""Replies topics' records carry the broker's append time (the start of a backlog's span)."""


async def create_topics(
    bootstrap: str, names: list[str], partitions: int, *, appended: frozenset[str] = frozenset()
) -> None:
    """Create topics; those in `appended` stamp records with the broker's append time."""
    settings = load_settings(bootstrap)
    async with kafka_clients.started(settings, kafka_clients.admin(settings)) as admin:
        await admin.create_topics(
            [
                NewTopic(n, partitions, 1, topic_configs=LOG_APPEND_TIME if n in appended else {})
                for n in names
            ]
        )


def echo_envelope(i: int) -> bytes:
    return orjson.dumps({"tool": "echo", "arguments": {"i": i, "t": time.time(), "pad": PAD}})


def sleep_envelope(i: int, seconds: float) -> bytes:
    return orjson.dumps({"tool": "sleep", "arguments": {"seconds": seconds}})


async def produce(
    bootstrap: str, topic: str, payloads: list[bytes], *, distinct_keys: bool
) -> None:
    """Produce payloads as fast as the broker takes them (a backlog)."""
    producer = kafka_clients.producer(
        load_settings(bootstrap), linger_ms=5, max_batch_size=512 << 10, acks=1
    )
    await producer.start()
    try:
        for i, value in enumerate(payloads):
            key = b"%d" % (i if distinct_keys else i % 1024)
            await producer.send(topic, value, key=key)
        await producer.flush()
    finally:
        await producer.stop()


class Replies:
    """Reads a replies topic from the beginning, counting and timing what arrives.

    `first_append` is the earliest broker append time seen (wall clock, s); `last` the wall
    time the latest reply was read."""

    def __init__(self, bootstrap: str, topic: str, *, read_committed: bool) -> None:
        self.consumer = kafka_clients.consumer(
            load_settings(bootstrap),
            topic,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=4 << 20,
            isolation_level="read_committed" if read_committed else "read_uncommitted",
        )
        self.count = 0
        self.first_append: float | None = None
        self.last: float = 0.0
        self.latencies_ms: list[float] = []

    async def __aenter__(self) -> Replies:
        await self.consumer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.consumer.stop()

    async def until(self, total: int, timeout_s: float, *, timed: bool = False) -> None:
        deadline = time.monotonic() + timeout_s
        while self.count < total and time.monotonic() < deadline:
            batches = await self.consumer.getmany(timeout_ms=200, max_records=20000)
            now_wall = time.time()
            for records in batches.values():
                if not records:
                    continue
                head = records[0]
                # Offsets grow with append times: a partition's first record is its earliest.
                appended = head.timestamp / 1000 if head.timestamp_type == 1 else now_wall
                if self.first_append is None or appended < self.first_append:
                    self.first_append = appended
                self.count += len(records)
                self.last = now_wall
                if timed:
                    for record in records:
                        sent = orjson.loads(record.value)["result"].get("t")
                        if sent is not None:
                            self.latencies_ms.append((now_wall - sent) * 1000)
        if self.count < total:
            raise TimeoutError(f"{self.count} of {total} replies within {timeout_s:.0f} s")


def _peak_rss_mb(pid: int) -> float:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return 0.0
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _paced_count(rate: float, seconds: float) -> int:
    return max(1, int(rate * seconds))


async def _paced(bootstrap: str, topic: str, rate: float, seconds: float) -> int:
    """Produce exactly _paced_count echo envelopes evenly over `seconds`; returns how many.

    Each 2 ms tick's envelopes go as one record batch per partition (keys partitioned as
    the Java client would): the harness shares the machine with the contender, and a send
    per record would cost it several times the CPU.
    """
    producer = kafka_clients.producer(load_settings(bootstrap), linger_ms=0, acks=1)
    await producer.start()
    total = _paced_count(rate, seconds)
    partitions = len(await producer.partitions_for(topic))
    sent, start = 0, time.monotonic()
    try:
        while sent < total:
            due = min(total, int((time.monotonic() - start) * rate) + 1)
            batches: dict[int, Any] = {}
            while sent < due:
                key = b"%d" % (sent % 1024)
                partition = partition_for(key, partitions)
                batch = batches.get(partition)
                if batch is None:
                    batch = batches[partition] = producer.create_batch()
                if batch.append(key=key, value=echo_envelope(sent), timestamp=None) is None:
                    break  # full: the rest of this tick's calls go at the next
                sent += 1
            for partition, batch in batches.items():
                await producer.send_batch(batch, topic, partition=partition)
            await asyncio.sleep(0.002)
        await producer.flush()
    finally:
        await producer.stop()
    return sent


Rates = Sequence[float] | Callable[[float], Sequence[float]]


async def measure(
    contender: Contender,
    bootstrap: str,
    backlog: list[bytes],
    *,
    distinct_keys: bool = False,
    paced_rates: Rates = (),
    paced_s: float = 5.0,
    timeout_s: float = 600.0,
    ideal_per_s: float | None = None,
) -> Result:
    """Run one contender over a backlog (throughput), then at each paced rate in turn.

    `paced_rates` may be a function of the measured throughput (calls/s).
    """
    await produce(bootstrap, contender.calls_topic, backlog, distinct_keys=distinct_keys)
    proc = _start(contender)
    latency: list[Latency] = []
    try:
        async with Replies(
            bootstrap, contender.replies_topic, read_committed=contender.read_committed
        ) as replies:
            await replies.until(len(backlog), timeout_s)
            assert replies.first_append is not None
            span = max(replies.last - replies.first_append, MIN_SPAN_S)
            per_s = (replies.count - 1) / span if replies.count > 1 else 0.0
            load_1m = os.getloadavg()[0]
            rates = paced_rates(per_s) if callable(paced_rates) else paced_rates
            for rate in sorted(rates):
                replies.latencies_ms.clear()
                expected = replies.count + _paced_count(rate, paced_s)
                await asyncio.gather(
                    _paced(bootstrap, contender.calls_topic, rate, paced_s),
                    replies.until(expected, paced_s + 120, timed=True),
                )
                lat = replies.latencies_ms
                latency.append(
                    Latency(rate, _percentile(lat, 0.5), _percentile(lat, 0.99), max(lat))
                )
        rss = _peak_rss_mb(proc.pid)
    finally:
        _stop(proc)
    return Result(contender.name, len(backlog), per_s, tuple(latency), rss, ideal_per_s, load_1m)


def _start(contender: Contender) -> subprocess.Popen[bytes]:
    """Start the contender in its own session, its output in its log file."""
    with open(Path(contender.env.get("BENCH_LOG", os.devnull)), "ab") as log:
        return subprocess.Popen(
            contender.cmd,
            env=contender.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
