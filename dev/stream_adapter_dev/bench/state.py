"""State at scale (`bench --state N`): how long a worker takes to answer with N parked approvals.

For each N a fresh app is filled, then measured:

- **fill**: N pending `send_invoice` approval records written straight to the approvals
  changelog, byte for byte what the table stores (`ApprovalRecord.to_bytes`, key the approval
  id, partition the approval id's), and the N calls they came from produced to the calls
  topic with the worker group's offsets committed past them: the broker then holds what N
  parked calls leave behind, without a worker parking them one by one.
- **fresh**: a worker with an empty data folder starts; one echo call per partition is sent
  at once; the figure is the time from the start until the last is answered.
- **failover**: a second worker (empty folder) joins; once both have their standby copies
  caught up and answer, the first is SIGKILLed and one echo call per partition is sent; the
  figure is the time from the kill until the last is answered, also given net of the
  session timeout, with how many records the survivor restored to take over.
- **RSS and disk** of the workers (resident memory, RocksDB folder) at those points.

Rounds interleave the sizes (10k 100k 1M, 10k 100k 1M, ...); figures are medians.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiokafka.structs import TopicPartition

from stream_adapter.core.approvals import new_record
from stream_adapter.core.envelope import Envelope
from stream_adapter.core.ids import approval_id_for, kafka_message_id
from stream_adapter.kafka import clients as kafka_clients
from stream_adapter.kafka.partitions import partition_for
from stream_adapter.settings import Settings
from stream_adapter_dev.chaos.environment import create_run_topics, run_settings
from stream_adapter_dev.chaos.harness import Worker, WorkerPool

TOOL = "send_invoice"
RESTORED = b"table partitions restored"
CAUGHT_UP = b"standby table partitions caught up"
CHANGELOG_RECORDS_PER_BATCH = 1 << 30
"""Records to a changelog record batch: as many as fit (512 KiB). The worker writes records as
it parks calls, in smaller batches; filling a million one record to a batch takes half an
hour (docs/bench.md has a comparison at 100,000)."""


@dataclass(frozen=True, slots=True)
class StatePoint:
    """One size measured once."""

    records: int
    guarantee: str
    fill_s: float
    fresh_answer_s: float
    """From a fresh worker's start until it answered a call on every partition."""
    fresh_restored: int
    """Changelog records the fresh worker restored (the whole table)."""
    fresh_rss_mb: float
    fresh_disk_mb: float
    failover_s: float
    """From the SIGKILL of one of two workers until the survivor answered on every partition."""
    failover_net_s: float
    """failover_s minus the session timeout (the time the group takes to notice the kill)."""
    failover_restored: int
    """Changelog records the survivor restored to take over (its standby copies' tails)."""
    survivor_rss_mb: float
    survivor_disk_mb: float


@dataclass(slots=True)
class StateResults:
    points: list[StatePoint] = field(default_factory=list)

    def summary(self) -> list[dict[str, Any]]:
        """Per guarantee and size: median (min, max) of each figure."""
        rows = []
        for guarantee, n in sorted({(p.guarantee, p.records) for p in self.points}):
            runs = [p for p in self.points if (p.guarantee, p.records) == (guarantee, n)]
            row: dict[str, Any] = {"guarantee": guarantee, "records": n, "runs": len(runs)}
            for name in (
                "fresh_answer_s",
                "failover_s",
                "failover_net_s",
                "failover_restored",
                "fresh_rss_mb",
                "fresh_disk_mb",
                "survivor_rss_mb",
                "survivor_disk_mb",
            ):
                values = [float(getattr(p, name)) for p in runs]
                row[name] = [round(statistics.median(values), 2), min(values), max(values)]
            row["restore_records_per_s"] = round(n / max(row["fresh_answer_s"][0], 1e-9))
            rows.append(row)
        return rows

    def to_json(self) -> dict[str, Any]:
        return {"points": [asdict(p) for p in self.points], "summary": self.summary()}


def record_template(settings: Settings) -> dict[str, Any]:
    """A pending record as the worker parks it (a dict in `to_bytes` field order)."""
    envelope = Envelope(
        tool=TOOL,
        arguments={"customer": "cust-0", "amount_cents": 1},
        run_id="r",
        call_id="c",
        approval_id=None,
        message_id="m",
        source="kafka",
    )
    record = new_record(envelope, TOOL, origin=f"kafka:{settings.app_id}", agent_key=b"r")
    return orjson.loads(record.to_bytes())  # type: ignore[no-any-return]


def parked(
    template: dict[str, Any], settings: Settings, i: int
) -> tuple[bytes, bytes, bytes, bytes]:
    """The i-th parked call: its Kafka key and envelope, its approval id and record."""
    run_id, call_id = f"run-{i % 4096}", f"call-{i:09d}"
    arguments = {"customer": f"cust-{i % 1000}", "amount_cents": i + 1}
    call = {"tool": TOOL, "arguments": arguments, "run_id": run_id, "call_id": call_id}
    approval_id = approval_id_for(run_id, call_id, "kafka")
    record = {
        **template,
        "approval_id": approval_id,
        "arguments": arguments,
        "run_id": run_id,
        "call_id": call_id,
        "message_id": kafka_message_id(settings.calls_topic, 0, i),
        "agent_key": run_id,
    }
    return run_id.encode(), orjson.dumps(call), approval_id.encode(), orjson.dumps(record)


class _Batches:
    """Record batches per (topic, partition), each sent once full: a send per record would
    make filling a million records the slow part."""

    def __init__(self, producer: Any, per_batch: int) -> None:
        self._producer = producer
        self._per_batch = per_batch
        self._open: dict[tuple[str, int], Any] = {}
        self._counts: dict[tuple[str, int], int] = {}
        self._sent: list[Any] = []

    async def add(self, topic: str, partition: int, key: bytes, value: bytes) -> None:
        where = (topic, partition)
        batch = self._open.get(where)
        if (
            batch is not None
            and self._counts[where] < self._per_batch
            and batch.append(key=key, value=value, timestamp=None) is not None
        ):
            self._counts[where] += 1
            return
        if batch is not None:
            self._sent.append(await self._producer.send_batch(batch, topic, partition=partition))
        batch = self._open[where] = self._producer.create_batch()
        batch.append(key=key, value=value, timestamp=None)
        self._counts[where] = 1

    async def close(self) -> None:
        for (topic, partition), batch in self._open.items():
            self._sent.append(await self._producer.send_batch(batch, topic, partition=partition))
        self._open.clear()
        await asyncio.gather(*self._sent)
        self._sent.clear()


async def fill(settings: Settings, n: int, per_batch: int = CHANGELOG_RECORDS_PER_BATCH) -> None:
    """n parked calls: their approval records on the changelog (per_batch records to a
    record batch), their calls on the calls topic, and the worker group's offsets
    committed past the calls."""
    producer = kafka_clients.producer(settings, max_batch_size=512 << 10, linger_ms=5)
    p = settings.partitions
    template = record_template(settings)
    async with kafka_clients.started(settings, producer):
        batches, calls = _Batches(producer, per_batch), _Batches(producer, 1 << 30)
        for i in range(n):
            key, call, approval_id, value = parked(template, settings, i)
            changelog = settings.approvals_topic
            await batches.add(changelog, partition_for(approval_id, p), approval_id, value)
            await calls.add(settings.calls_topic, partition_for(key, p), key, call)
        await batches.close()
        await calls.close()
    consumer = kafka_clients.consumer(settings, group_id=settings.app_id)
    async with kafka_clients.started(settings, consumer):
        tps = [TopicPartition(settings.calls_topic, i) for i in range(p)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        await consumer.commit({tp: end for tp, end in ends.items() if end})


class Probe:
    """Sends one echo call per partition and waits until each is answered."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._keys = _key_per_partition(settings.partitions)
        self._producer = kafka_clients.producer(settings)
        self._replies = kafka_clients.consumer(settings)
        self._answered: set[str] = set()

    async def __aenter__(self) -> Probe:
        await self._producer.start()
        await self._replies.start()
        topic = self._settings.replies_topic
        tps = [TopicPartition(topic, i) for i in range(self._settings.partitions)]
        self._replies.assign(tps)
        await self._replies.seek_to_end(*tps)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._replies.stop()
        await self._producer.stop()

    async def answer_all(self, timeout_s: float) -> float:
        """Send the calls, then wait; the monotonic time the last was answered."""
        nonce = uuid.uuid4().hex[:8]
        wanted = {f"{nonce}-{p}" for p in range(len(self._keys))}
        for p, key in enumerate(self._keys):
            call = {"tool": "echo", "arguments": {"probe": f"{nonce}-{p}"}}
            await self._producer.send(self._settings.calls_topic, orjson.dumps(call), key=key)
        await self._producer.flush()
        deadline = time.monotonic() + timeout_s
        while not wanted <= self._answered:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(wanted - self._answered)} probe calls unanswered")
            batches = await self._replies.getmany(timeout_ms=50)
            for records in batches.values():
                for record in records:
                    result = orjson.loads(record.value).get("result")
                    if isinstance(result, dict) and isinstance(result.get("probe"), str):
                        self._answered.add(result["probe"])
        return time.monotonic()


def _key_per_partition(partitions: int) -> list[bytes]:
    keys: dict[int, bytes] = {}
    i = 0
    while len(keys) < partitions:
        key = b"probe-%d" % i
        keys.setdefault(partition_for(key, partitions), key)
        i += 1
    return [keys[p] for p in range(partitions)]


def rss_mb(worker: Worker) -> float:
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
        for line in Path(f"/proc/{worker.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def disk_mb(worker: Worker) -> float:
    folder = worker.workdir / f"{worker.name}-data"
    total = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    return round(total / (1 << 20), 1)


def _log_numbers(log: bytes, line: bytes, name: bytes) -> list[int]:
    """The integer field `name` of each log line containing `line` (text log format)."""
    pattern = re.compile(rb" " + re.escape(name) + rb"=(\d+)")
    return [
        int(found.group(1))
        for text in log.splitlines()
        if line in text and (found := pattern.search(text)) is not None
    ]


async def _until_in_log(worker: Worker, line: bytes, count: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while worker.log_since_start().count(line) < count:
        if not worker.alive or time.monotonic() > deadline:
            raise TimeoutError(f"{worker.name}: no {line.decode()!r} line:\n{worker.log_tail()}")
        await asyncio.sleep(0.05)


async def measure(
    bootstrap: str,
    workdir: Path,
    n: int,
    guarantee: str,
    timeout_s: float,
    say: Callable[[str], None],
    worker_env: dict[str, str] | None = None,
    failover: bool = True,
) -> StatePoint:
    """Fill a fresh app with n parked calls, then time a fresh worker and a failover;
    worker_env is added to the workers' environment (PYTHONPATH: another checkout's code);
    without failover, its figures are 0."""
    settings = run_settings(
        bootstrap, workdir, f"state-{n}", partitions=8, processing_guarantee=guarantee
    )
    await create_run_topics(settings)
    began = time.monotonic()
    await fill(settings, n)
    fill_s = time.monotonic() - began
    say(f"{n:,} parked calls written in {fill_s:.1f} s")
    pool = WorkerPool(settings, workdir / "workers", extra_env=dict(worker_env or {}))
    try:
        async with Probe(settings) as probe:
            first = pool.slot("w1")
            started = time.monotonic()
            first.start()
            fresh_answer_s = await probe.answer_all(timeout_s) - started
            fresh = (rss_mb(first), disk_mb(first))
            fresh_restored = sum(_log_numbers(first.log_since_start(), RESTORED, b"records"))
            say(f"fresh worker answered after {fresh_answer_s:.1f} s")
            if not failover:
                return _point(settings, n, fill_s, fresh_answer_s, fresh_restored, fresh)
            second = await pool.start("w2")
            for worker in (first, second):
                await _until_in_log(worker, CAUGHT_UP, 1, timeout_s)
            await probe.answer_all(timeout_s)  # both serve
            survivor = (rss_mb(second), disk_mb(second))
            restored_before = len(_log_numbers(second.log_since_start(), RESTORED, b"records"))
            killed = time.monotonic()
            pool.kill(first)
            failover_s = await probe.answer_all(timeout_s) - killed
            restored = _log_numbers(second.log_since_start(), RESTORED, b"records")
            say(f"survivor answered {failover_s:.1f} s after the kill")
    finally:
        await pool.stop_all()
    return _point(
        settings,
        n,
        fill_s,
        fresh_answer_s,
        fresh_restored,
        fresh,
        failover_s,
        sum(restored[restored_before:]),
        survivor,
    )


def _point(
    settings: Settings,
    n: int,
    fill_s: float,
    fresh_answer_s: float,
    fresh_restored: int,
    fresh: tuple[float, float],
    failover_s: float = 0.0,
    failover_restored: int = 0,
    survivor: tuple[float, float] = (0.0, 0.0),
) -> StatePoint:
    return StatePoint(
        records=n,
        guarantee=settings.processing_guarantee,
        fill_s=round(fill_s, 2),
        fresh_answer_s=round(fresh_answer_s, 2),
        fresh_restored=fresh_restored,
        fresh_rss_mb=fresh[0],
        fresh_disk_mb=fresh[1],
        failover_s=round(failover_s, 2),
        failover_net_s=round(failover_s - settings.session_timeout_s, 2) if failover_s else 0.0,
        failover_restored=failover_restored,
        survivor_rss_mb=survivor[0],
        survivor_disk_mb=survivor[1],
    )


async def run_state(
    bootstrap: str,
    workdir: Path,
    *,
    sizes: tuple[int, ...],
    guarantees: tuple[str, ...] = ("at_least_once",),
    rounds: int = 1,
    timeout_s: float = 600.0,
    say: Callable[[str], None] = print,
    worker_env: dict[str, str] | None = None,
    failover: bool = True,
) -> StateResults:
    """Every size and guarantee once per round, the rounds interleaved."""
    results = StateResults()
    for round_no in range(1, rounds + 1):
        for guarantee in guarantees:
            for n in sizes:
                say(f"round {round_no}: {n:,} records, {guarantee}")
                folder = workdir / f"r{round_no}-{guarantee}-{n}"
                point = await measure(
                    bootstrap, folder, n, guarantee, timeout_s, say, worker_env, failover
                )
                results.points.append(point)
    return results


def state_command(
    configured_bootstrap: str,
    *,
    sizes: tuple[int, ...],
    guarantees: tuple[str, ...],
    rounds: int,
    out: Path,
    own_broker: bool,
    jars_dir: Path,
    say: Callable[[str], None] = print,
    table: Callable[[str], None] = print,
) -> StateResults:
    """`bench --state`: on a fresh local broker (its data in a temporary folder), or the
    configured one. Steps go to say (stderr in the CLI), the summary table to table."""
    import tempfile

    from stream_adapter_dev.bench.state_report import print_state, write_state
    from stream_adapter_dev.broker import local

    with tempfile.TemporaryDirectory(prefix="sa-state-") as home:
        config = None
        bootstrap = configured_bootstrap
        if own_broker:
            config = local.BrokerConfig(
                home=Path(home),
                port=local.free_port(),
                controller_port=local.free_port(),
                heap_mb=1024,
                jvm_flags=("-XX:TieredStopAtLevel=1",),  # as the throughput bench's broker
                jars_dir=jars_dir,
            )
            say(f"starting a local broker on {config.bootstrap}")
            bootstrap = local.start(config)
        try:
            results = asyncio.run(
                run_state(
                    bootstrap,
                    Path(home) / "run",
                    sizes=sizes,
                    guarantees=guarantees,
                    rounds=rounds,
                    say=say,
                )
            )
        finally:
            if config is not None:
                local.stop(config)
    print_state(results, table)
    json_path, png_path = write_state(results, out)
    table(f"wrote {json_path} and {png_path}")
    return results
