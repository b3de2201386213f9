"""Broker connectivity as states: a flood of Kafka client lines becomes its first line, one
"unreachable" line, summaries and one "reachable again" line; a blip changes no state; at
DEBUG every client line is kept. Driven by real log records on aiokafka's loggers, a
stand-in probe and a hand-moved clock."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest
from prometheus_client import generate_latest

from stream_adapter.kafka.connectivity import BrokerChange, BrokerStatus, BrokerWatch, describe
from stream_adapter.stream.metrics import Metrics
from stream_adapter.stream.web import health_text

SERVERS = "kafka-1:9092,kafka-2:9092"
CLIENT = logging.getLogger("aiokafka")
FETCHER = logging.getLogger("aiokafka.consumer.fetcher")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Probe:
    """Fails with error while error is set."""

    def __init__(self) -> None:
        self.error: Exception | None = None
        self.calls = 0

    async def __call__(self) -> None:
        self.calls += 1
        if self.error is not None:
            raise self.error


class Lines(logging.Handler):
    """Every record that reaches the root logger at INFO and above."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def text(self) -> list[str]:
        return [f"{r.levelname} {r.name} {r.getMessage()}" for r in self.records]

    def ours(self) -> list[logging.LogRecord]:
        return [r for r in self.records if r.name == "stream_adapter"]

    def clients(self) -> list[logging.LogRecord]:
        return [r for r in self.records if r.name.startswith("aiokafka")]


@pytest.fixture
def lines() -> Iterator[Lines]:
    root = logging.getLogger()
    handler, level = Lines(), root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield handler
    root.removeHandler(handler)
    root.setLevel(level)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def probe() -> Probe:
    return Probe()


@pytest.fixture
def watch(clock: Clock, probe: Probe) -> Iterator[BrokerWatch]:
    made = BrokerWatch(SERVERS, probe, clock=clock, wall=lambda: clock.now + 1e9)
    made.noise.install()
    yield made
    made.noise.remove()


def flood(seconds: int, clock: Clock, per_s: int = 70) -> None:
    """What aiokafka logs while its broker is gone, for seconds."""
    for _ in range(seconds):
        for _ in range(per_s // 2):
            CLIENT.error("Unable connect to node with id %s: %s", 1, "[Errno 111] refused")
            FETCHER.error("Failed fetch messages from %s: %s", 1, "NodeNotReadyError")
        clock.now += 1


async def run_for(watch: BrokerWatch, clock: Clock, seconds: float) -> None:
    """The watch's rounds over seconds of quiet clients."""
    end = clock.now + seconds
    while clock.now < end:
        await watch.check()
        clock.now += 0.5


async def test_a_seventy_second_outage_writes_a_handful_of_lines(
    watch: BrokerWatch, probe: Probe, clock: Clock, lines: Lines
) -> None:
    await watch.check()  # healthy
    probe.error = ConnectionRefusedError(111, "Connect call failed")
    for _ in range(70):
        flood(1, clock)
        await watch.check()
    assert not watch.status().reachable
    probe.error = None
    await run_for(watch, clock, 15)
    assert watch.status().reachable

    assert len(lines.clients()) == 1  # the first, which says what the clients met
    assert lines.clients()[0].getMessage().startswith("Unable connect to node with id 1")
    ours = [r.getMessage() for r in lines.ours()]
    assert ours == [
        "broker unreachable, retrying",
        ours[1],
        ours[2],
        "broker reachable again after 72 s",
    ], lines.text()
    # A summary a minute in, and one for the rest when the clients fall quiet.
    assert ours[1].startswith("suppressed 4,199 Kafka client lines in 60 s like: ")
    assert ours[2].startswith("suppressed 700 Kafka client lines in 12 s like: ")
    down = lines.ours()[0]
    assert down.levelno == logging.WARNING
    assert down.sa_fields == {  # type: ignore[attr-defined]
        "servers": SERVERS,
        "state": "unreachable",
        "error_kind": "ConnectionRefusedError",
    }
    assert lines.ours()[-1].sa_fields["outage_s"] == 72  # type: ignore[attr-defined]
    assert watch.status().suppressed == 70 * 70 - 1
    assert watch.status().outages == 1


async def test_status_follows_the_outage(
    watch: BrokerWatch, probe: Probe, clock: Clock, lines: Lines
) -> None:
    assert watch.status() == BrokerStatus(SERVERS)
    probe.error = OSError("unreachable")
    flood(1, clock)
    await watch.check()
    clock.now += 20
    status = watch.status()
    assert (status.reachable, status.outage_s, status.error_kind) == (False, 21.0, "OSError")
    assert status.since == pytest.approx(clock.now + 1e9 - 21)
    probe.error = None
    await run_for(watch, clock, 5)
    assert watch.status().reachable and watch.status().since is None
    assert watch.status().outage_s == 0


async def test_a_blip_the_probe_does_not_confirm_changes_no_state(
    watch: BrokerWatch, probe: Probe, clock: Clock, lines: Lines
) -> None:
    flood(2, clock, per_s=10)  # a leader moved: the clients complain, the cluster answers
    await run_for(watch, clock, 12)
    assert probe.calls >= 3  # checked more often while the clients complained
    assert watch.status().reachable and watch.status().outages == 0
    texts = lines.text()
    assert len(texts) == 2, texts  # their first line, and the summary when they fell quiet
    assert texts[1].startswith("INFO stream_adapter suppressed 19 Kafka client lines")
    # The episode is over: the next line passes again.
    FETCHER.error("Failed fetch messages from %s: %s", 2, "NodeNotReadyError")
    assert len(lines.clients()) == 2


async def test_at_debug_every_client_line_is_kept(
    watch: BrokerWatch, probe: Probe, clock: Clock, lines: Lines
) -> None:
    logging.getLogger().setLevel(logging.DEBUG)
    probe.error = ConnectionRefusedError()
    flood(3, clock, per_s=10)
    await watch.check()
    assert len(lines.clients()) == 30
    assert not watch.status().reachable  # the state follows all the same


async def test_other_client_lines_pass(watch: BrokerWatch, clock: Clock, lines: Lines) -> None:
    coordinator = logging.getLogger("aiokafka.consumer.group_coordinator")
    coordinator.info("Discovered coordinator %s for group %s", 1, "g")
    flood(1, clock, per_s=4)
    CLIENT.error("Topic %s is not authorized for this client", "calls")
    coordinator.info("Joined group %s", "g")
    # Within the episode, the clients finding their way back is noise too.
    coordinator.info("Discovered coordinator %s for group %s", 1, "g")
    coordinator.info("OffsetCommit failed for group %s due to a coordinator error", "g")
    assert [r.getMessage() for r in lines.clients()] == [
        "Discovered coordinator 1 for group g",
        "Unable connect to node with id 1: [Errno 111] refused",
        "Topic calls is not authorized for this client",
        "Joined group g",
    ]
    assert watch.noise.pending == 3 + 2


async def test_stop_summarises_what_was_held_back(
    watch: BrokerWatch, clock: Clock, lines: Lines
) -> None:
    flood(1, clock, per_s=6)
    await watch.stop()
    assert lines.text()[-1].startswith("INFO stream_adapter suppressed 5 Kafka client lines")
    flood(1, clock, per_s=6)  # the filter is gone with the watch
    assert len(lines.clients()) == 7


def test_health_and_metrics_say_the_broker_is_unreachable() -> None:
    down = BrokerStatus(
        SERVERS,
        reachable=False,
        since=1_800_000_000.0,
        outage_s=42.4,
        outages=2,
        suppressed=900,
        error_kind="ConnectionRefusedError",
    )
    assert health_text([], BrokerStatus(SERVERS)) == "ok\n"
    assert health_text([], down) == (
        "degraded: broker unreachable since 2027-01-15T08:00:00+00:00 (42 s, "
        f"ConnectionRefusedError), retrying {SERVERS}\n"
    )
    metrics = Metrics()
    statuses = iter([down, BrokerStatus(SERVERS, outages=2, suppressed=900)])
    metrics.watch_broker(lambda: next(statuses))
    text = generate_latest(metrics.registry).decode()
    assert "stream_adapter_broker_up 0.0" in text
    assert "stream_adapter_broker_outage_seconds 42.4" in text
    assert "stream_adapter_broker_outages_total 2.0" in text
    assert "stream_adapter_kafka_client_lines_suppressed_total 900.0" in text
    text = generate_latest(metrics.registry).decode()
    assert "stream_adapter_broker_up 1.0" in text
    assert "stream_adapter_broker_outage_seconds 0.0" in text


def test_the_sentence_names_servers_and_kind_never_more() -> None:
    assert describe(BrokerChange(SERVERS, False, error_kind="TimeoutError")) == (
        f"broker unreachable ({SERVERS}: TimeoutError), retrying"
    )
    assert describe(BrokerChange(SERVERS, True, outage_s=61.4)) == (
        "broker reachable again after 61 s"
    )


async def test_back_only_once_the_clients_have_settled(
    watch: BrokerWatch, probe: Probe, clock: Clock, lines: Lines
) -> None:
    probe.error = ConnectionRefusedError()
    flood(1, clock)
    await watch.check()
    probe.error = None  # a broker answers, but the clients still fail to fetch
    for _ in range(5):
        flood(1, clock, per_s=4)
        await watch.check()
    assert not watch.status().reachable
    await run_for(watch, clock, watch.settle_s + watch.retry_every_s)
    assert watch.status().reachable
    assert [m for m in (r.getMessage() for r in lines.ours()) if "broker" in m] == [
        "broker unreachable, retrying",
        "broker reachable again after 9 s",
    ]


async def test_stop_ends_the_watch_even_when_a_probe_swallows_its_cancel() -> None:
    """A cancel that a probe swallows (a client library's own handling, or one that lands as
    the probe ends) leaves the loop running: the watch still ends at its next turn, so a
    short command such as `stream-adapter call` exits instead of hanging in its stop."""
    probing = asyncio.Event()

    async def stubborn() -> None:
        probing.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            return  # swallowed: the probe "finished" instead of being cancelled

    watch = BrokerWatch(SERVERS, stubborn, check_every_s=0.0, retry_every_s=0.0)
    await watch.start()
    await asyncio.wait_for(probing.wait(), 5)
    await asyncio.wait_for(watch.stop(), 5)  # TimeoutError here: the stop hung
