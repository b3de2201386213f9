"""Scale-out: one, two and three workers against a three-node cluster (`bench --scale-out`).

Each round starts a fresh app (own topics, replication 3) with one worker, then, in turn:
a burst of echo calls answered by the current group (throughput, and the workers' CPU per
call), a paced load while one more worker joins (the rebalance pause: the longest time
without a reply from its start until it has served for a while), and so on up to three
workers. Rounds repeat, so the group sizes interleave (1 2 3, 1 2 3, …). A last step runs
one worker on a single partition: what one partition carries when the CPU is not the limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from stream_adapter.kafka import clients as kafka_clients
from stream_adapter.kafka.partitions import partition_for
from stream_adapter.settings import Settings
from stream_adapter_dev.chaos.environment import create_run_topics, run_settings
from stream_adapter_dev.chaos.harness import Worker, WorkerPool
from stream_adapter_dev.chaos.report import longest_gap

MAX_WORKERS = 3
PACED_FRACTION = 0.3
"""The join pauses are measured under a paced load at this fraction of one worker's rate."""
SETTLE_S = 5.0
"""After a joining worker is ready, the pause window goes on this long."""
MIN_SPAN_S = 0.1
_TICK_S = 0.01
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class Burst:
    """One burst of calls answered by a group of `workers`."""

    workers: int
    partitions: int
    calls: int
    calls_per_s: float
    cpu_ms_per_call: float
    """CPU time of all the group's worker processes during the burst, per call."""


@dataclass(frozen=True, slots=True)
class Join:
    """One worker joining a serving group: the longest time without a reply meanwhile."""

    workers_after: int
    paced_per_s: float
    pause_s: float
    ready_s: float
    """From the new worker's start until it was ready (joined, tables recovered)."""


@dataclass(slots=True)
class ScaleResults:
    """Every burst and join of the run, in the order they ran."""

    bursts: list[Burst] = field(default_factory=list)
    joins: list[Join] = field(default_factory=list)

    def summary(self) -> list[dict[str, Any]]:
        """Per group size: median and range of throughput, CPU per call and join pause."""
        rows = []
        for workers, partitions in sorted({(b.workers, b.partitions) for b in self.bursts}):
            bursts = [b for b in self.bursts if (b.workers, b.partitions) == (workers, partitions)]
            joins = [j for j in self.joins if j.workers_after == workers and partitions > 1]
            rates = [b.calls_per_s for b in bursts]
            cpu = [b.cpu_ms_per_call for b in bursts]
            pauses = [j.pause_s for j in joins]
            rows.append(
                {
                    "workers": workers,
                    "partitions": partitions,
                    "runs": len(bursts),
                    "calls_per_s_median": round(statistics.median(rates), 1),
                    "calls_per_s_range": [round(min(rates), 1), round(max(rates), 1)],
                    "cpu_ms_per_call_median": round(statistics.median(cpu), 3),
                    "join_pause_s": [round(p, 2) for p in pauses],
                }
            )
        return rows

    def to_json(self) -> dict[str, Any]:
        return {
            "bursts": [asdict(b) for b in self.bursts],
            "joins": [asdict(j) for j in self.joins],
            "summary": self.summary(),
        }


class _Replies:
    """Follows a replies topic; counts the calls answered and keeps when each batch arrived."""

    def __init__(self, settings: Settings) -> None:
        self._consumer = kafka_clients.consumer(
            settings, settings.replies_topic, auto_offset_reset="earliest"
        )
        self.count = 0
        """Calls answered (each counted once, by the `i` its echo carries)."""
        self.batches: list[tuple[float, int]] = []  # (time.monotonic(), calls answered)
        self._seen: set[int] = set()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._consumer.start()
        self._task = asyncio.create_task(self._follow())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._consumer.stop()

    async def _follow(self) -> None:
        while True:
            batches = await self._consumer.getmany(timeout_ms=100, max_records=20_000)
            before = len(self._seen)
            for records in batches.values():
                for record in records:
                    result = orjson.loads(record.value).get("result")
                    if isinstance(result, dict) and "i" in result:
                        self._seen.add(result["i"])
            n = len(self._seen) - before  # a reply again after a rebalance is not counted
            if n:
                self.count += n
                self.batches.append((time.monotonic(), n))

    async def until(self, total: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self.count < total:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.count} of {total} replies within {timeout_s:.0f} s")
            await asyncio.sleep(0.05)

    def rate_since(self, start: float) -> float:
        """Replies per second from the first to the last batch that arrived after start (a
        burst answered in one fetch counts as MIN_SPAN_S long)."""
        after = [(t, n) for t, n in self.batches if t >= start]
        if not after:
            return 0.0
        if len(after) == 1:
            return after[0][1] / MIN_SPAN_S
        return sum(n for _, n in after[1:]) / max(after[-1][0] - after[0][0], MIN_SPAN_S)

    def arrivals(self) -> list[float]:
        return [t for t, _ in self.batches]


def _envelope(i: int) -> bytes:
    return orjson.dumps({"tool": "echo", "arguments": {"i": i, "pad": "x" * 120}})


def _cpu_s(workers: list[Worker]) -> float:
    """User + system CPU seconds of the workers' processes so far."""
    total = 0.0
    for worker in workers:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            fields = Path(f"/proc/{worker.pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
    return total


class _Group:
    """One app: its topics, its workers, a producer of calls and a reply follower."""

    def __init__(self, bootstrap: str, workdir: Path, partitions: int, replication: int) -> None:
        self.settings = run_settings(
            bootstrap,
            workdir,
            f"scale-{uuid.uuid4().hex[:4]}",
            partitions=partitions,
            replication_factor=replication,
        )
        self.pool = WorkerPool(self.settings, workdir / "workers")
        self.replies = _Replies(self.settings)
        self.producer = kafka_clients.producer(
            self.settings, enable_idempotence=True, max_batch_size=256 << 10
        )
        self.sent = 0

    async def __aenter__(self) -> _Group:
        await create_run_topics(self.settings)
        await self.producer.start()
        await self.replies.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.pool.stop_all()
        await self.replies.stop()
        await self.producer.stop()

    async def _send(self, count: int) -> None:
        """count echo calls, handed over as one record batch per partition (keys partitioned
        as the Java client does): a send per record made the harness, not the workers, the
        limit of a burst."""
        topic, partitions = self.settings.calls_topic, self.settings.partitions
        batches: dict[int, Any] = {}
        for _ in range(count):
            key = b"%d" % (self.sent % 1024)
            partition = partition_for(key, partitions)
            value = _envelope(self.sent)
            batch = batches.get(partition)
            if batch is None or batch.append(key=key, value=value, timestamp=None) is None:
                if batch is not None:  # full: send it, start the next
                    await self.producer.send_batch(batch, topic, partition=partition)
                batch = batches[partition] = self.producer.create_batch()
                batch.append(key=key, value=value, timestamp=None)
            self.sent += 1
        for partition, batch in batches.items():
            await self.producer.send_batch(batch, topic, partition=partition)

    async def burst(self, calls: int, timeout_s: float) -> Burst:
        live = self.pool.live()
        start, cpu_before = time.monotonic(), _cpu_s(live)
        await self._send(calls)
        await self.producer.flush()
        await self.replies.until(self.sent, timeout_s)
        cpu = _cpu_s(live) - cpu_before
        return Burst(
            len(live),
            self.settings.partitions,
            calls,
            round(self.replies.rate_since(start), 1),
            round(1000 * cpu / calls, 3),
        )

    async def join(self, name: str, rate: float, timeout_s: float, settle_s: float) -> Join:
        """Start worker name while calls arrive at rate; the longest time without a reply."""
        stop = asyncio.Event()

        async def paced() -> None:
            begun = time.monotonic()
            while not stop.is_set():
                due = int((time.monotonic() - begun) * rate) + 1
                await self._send(max(0, due - (self.sent - first)))
                await asyncio.sleep(_TICK_S)

        first = self.sent
        pacer = asyncio.create_task(paced())
        await asyncio.sleep(1.0)  # the group serves the paced load before the join
        start = time.monotonic()
        await self.pool.start(name)
        ready = time.monotonic()
        await asyncio.sleep(settle_s)
        end = time.monotonic()
        stop.set()
        await pacer
        await self.producer.flush()
        await self.replies.until(self.sent, timeout_s)
        pause = longest_gap(self.replies.arrivals(), start, end)
        return Join(len(self.pool.live()), rate, round(pause, 2), round(ready - start, 2))


async def run_scale(
    bootstrap: str,
    workdir: Path,
    *,
    calls: int,
    partitions: int,
    replication: int,
    rounds: int = 2,
    timeout_s: float = 600.0,
    settle_s: float = SETTLE_S,
    say: Callable[[str], None] = print,
) -> ScaleResults:
    """Rounds of 1 -> 2 -> 3 workers, then one worker on one partition; see the module doc."""
    results = ScaleResults()
    for round_no in range(1, rounds + 1):
        async with _Group(bootstrap, workdir / f"round{round_no}", partitions, replication) as g:
            await g.pool.start("w1")
            await g.burst(min(calls, 2000), timeout_s)  # warm-up, not counted
            one = await g.burst(calls, timeout_s)
            results.bursts.append(one)
            say(f"round {round_no}: 1 worker {one.calls_per_s:.0f} calls/s")
            for n in range(2, MAX_WORKERS + 1):
                rate = max(10.0, PACED_FRACTION * one.calls_per_s)
                joined = await g.join(f"w{n}", rate, timeout_s, settle_s)
                results.joins.append(joined)
                burst = await g.burst(calls, timeout_s)
                results.bursts.append(burst)
                say(
                    f"round {round_no}: {n} workers {burst.calls_per_s:.0f} calls/s, "
                    f"join pause {joined.pause_s:.1f} s"
                )
    async with _Group(bootstrap, workdir / "one-partition", 1, replication) as g:
        await g.pool.start("w1")
        await g.burst(min(calls, 2000), timeout_s)
        single = await g.burst(calls, timeout_s)
        results.bursts.append(single)
        say(f"1 worker, 1 partition: {single.calls_per_s:.0f} calls/s")
    return results


def print_scale(results: ScaleResults, say: Callable[[str], None] = print) -> None:
    """The summary as a plain table."""
    say(
        f"{'workers':>7} {'partitions':>10} {'runs':>4} {'calls/s (median, range)':>28} "
        f"{'CPU ms/call':>11}  join pauses (s)"
    )
    for row in results.summary():
        low, high = row["calls_per_s_range"]
        say(
            f"{row['workers']:>7} {row['partitions']:>10} {row['runs']:>4} "
            f"{row['calls_per_s_median']:>12.0f} ({low:.0f}-{high:.0f}){'':>6} "
            f"{row['cpu_ms_per_call_median']:>11.3f}  {row['join_pause_s']}"
        )


def write_scale(results: ScaleResults, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "scale.json"
    path.write_text(orjson.dumps(results.to_json(), option=orjson.OPT_INDENT_2).decode())
    return path


def scale_out_command(
    configured_bootstrap: str,
    *,
    calls: int,
    partitions: int,
    out: Path,
    own_broker: bool,
    jars_dir: Path,
    say: Callable[[str], None] = print,
    table: Callable[[str], None] = print,
) -> ScaleResults:
    """`bench --scale-out`: on a fresh local three-node cluster, or the configured broker.
    Steps go to say (stderr in the CLI), the summary table to table."""
    import tempfile

    from stream_adapter_dev.broker import cluster

    with tempfile.TemporaryDirectory(prefix="sa-scale-") as home:
        config = None
        bootstrap = configured_bootstrap
        if own_broker:
            config = cluster.ClusterConfig.on_free_ports(Path(home), jars_dir=jars_dir)
            say(f"starting a local three-node cluster on {config.bootstrap}")
            bootstrap = cluster.start(config)
        try:
            results = asyncio.run(
                run_scale(
                    bootstrap,
                    Path(home) / "run",
                    calls=calls,
                    partitions=partitions,
                    replication=cluster.REPLICATION if own_broker else 1,
                    say=say,
                )
            )
        finally:
            if config is not None:
                cluster.stop(config)
    print_scale(results, table)
    table(f"wrote {write_scale(results, out)}")
    return results
