"""Agents and readers of another client family: librdkafka (confluent-kafka) produces calls
with every codec, idempotently and in transactions, and reads the replies read_committed.

Each committed call is answered exactly once, a call of an aborted transaction never runs, and
the worker is alive at the end, at either processing guarantee.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, Producer

from stream_adapter.settings import Settings
from stream_adapter.stream.topics import create_topics
from tests.harness import WorkerProcess, make_settings, unique

pytestmark = pytest.mark.integration

CODECS = ("gzip", "snappy", "lz4", "zstd")
CALLS_PER_PRODUCER = 12


@pytest.fixture(scope="module", params=["at_least_once", "exactly_once"])
def settings(
    request: pytest.FixtureRequest, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Settings:
    result = make_settings(
        kafka_bootstrap, tmp_path_factory.mktemp("any"), processing_guarantee=request.param
    )
    asyncio.run(create_topics(result))
    return result


@pytest.fixture(scope="module")
def worker(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    started = WorkerProcess(settings, tmp_path_factory.mktemp("any-work")).start()
    try:
        asyncio.run(started.ready())
        yield started
    finally:
        started.kill()


class Replies:
    """A librdkafka consumer of the replies topic, read_committed, from the beginning."""

    def __init__(self, settings: Settings) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": settings.bootstrap_servers,
                "group.id": unique("agents-readers"),
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        self.consumer.subscribe([settings.replies_topic])
        self.by_call: Counter[str] = Counter()
        self.replies: dict[str, dict[str, Any]] = {}
        self.headers: dict[str, dict[str, bytes]] = {}

    def until(self, call_ids: set[str], timeout_s: float = 60.0) -> None:
        """Read until every call_id has a reply; fail past the deadline."""
        deadline = time.monotonic() + timeout_s
        while not call_ids <= set(self.by_call):
            if time.monotonic() > deadline:
                missing = sorted(call_ids - set(self.by_call))
                raise AssertionError(f"no reply for {len(missing)} calls: {missing[:5]}")
            self.drain(0.5)

    def drain(self, poll_s: float) -> None:
        message = self.consumer.poll(poll_s)
        while message is not None:
            assert message.error() is None, message.error()
            reply = orjson.loads(message.value())
            self.by_call[reply["call_id"]] += 1
            self.replies[reply["call_id"]] = reply
            self.headers[reply["call_id"]] = dict(message.headers() or [])
            message = self.consumer.poll(0)

    def close(self) -> None:
        self.consumer.close()


@pytest.fixture
def replies(settings: Settings) -> Iterator[Replies]:
    reader = Replies(settings)
    try:
        yield reader
    finally:
        reader.close()


def _envelope(tool: str, arguments: dict[str, Any], call_id: str) -> bytes:
    return orjson.dumps(
        {"tool": tool, "arguments": arguments, "run_id": call_id, "call_id": call_id}
    )


def _producer(settings: Settings, **config: Any) -> Producer:
    return Producer({"bootstrap.servers": settings.bootstrap_servers, "linger.ms": 20, **config})


def _delivered(producer: Producer) -> None:
    assert producer.flush(30) == 0, "messages left undelivered"


def test_calls_in_every_codec_and_idempotent_are_answered_exactly_once(
    settings: Settings, worker: WorkerProcess, replies: Replies
) -> None:
    sent: dict[str, str] = {}
    producers = {codec: {"compression.type": codec} for codec in CODECS}
    producers["idempotent-zstd"] = {
        "compression.type": "zstd",
        "enable.idempotence": True,
        "acks": "all",
    }
    for name, config in producers.items():
        producer = _producer(settings, **config)
        for i in range(CALLS_PER_PRODUCER):
            call_id = unique(name)
            sent[call_id] = name
            # Several keys per producer: batches of many records on several partitions.
            producer.produce(
                settings.calls_topic,
                _envelope("add", {"a": i, "b": 1}, call_id),
                key=f"{name}-{i % 3}".encode(),
            )
        _delivered(producer)

    replies.until(set(sent))
    replies.drain(1.0)  # anything more would be a duplicate
    assert {call_id: replies.by_call[call_id] for call_id in sent} == dict.fromkeys(sent, 1)
    for call_id in sent:
        assert replies.replies[call_id]["status"] == "ok"
        assert replies.headers[call_id]["content-type"] == b"application/json"
    assert worker.proc is not None and worker.proc.poll() is None, worker.log_text()[-3000:]


def test_a_transactional_agent_commits_and_aborts(
    settings: Settings, worker: WorkerProcess, replies: Replies
) -> None:
    """The aborted calls never run: flaky counts its runs per key, and the committed call on
    the same key reports the first run; no aborted call gets a reply."""
    producer = _producer(
        settings,
        **{"transactional.id": unique("agents-tx"), "compression.type": "lz4"},
    )
    producer.init_transactions(30)
    key = unique("flaky")
    aborted = [unique("aborted") for _ in range(3)]
    committed = [unique("committed") for _ in range(2)]

    producer.begin_transaction()
    for call_id in aborted:
        producer.produce(
            settings.calls_topic,
            _envelope("flaky", {"key": key, "fail_times": 0}, call_id),
            key=key.encode(),
        )
    producer.flush(30)  # on the broker, then thrown away
    producer.abort_transaction(30)

    producer.begin_transaction()
    for call_id in committed:
        producer.produce(
            settings.calls_topic,
            _envelope("flaky", {"key": key, "fail_times": 0}, call_id),
            key=key.encode(),
        )
    producer.commit_transaction(30)

    replies.until(set(committed))
    replies.drain(1.0)
    # Same key, so same partition and offset order: the aborted calls came first.
    attempts = [replies.replies[call_id]["result"]["attempts"] for call_id in committed]
    assert attempts == [1, 2], "a call of the aborted transaction ran"
    assert not set(aborted) & set(replies.by_call), "an aborted call was answered"
    assert [replies.by_call[c] for c in committed] == [1, 1]
    assert worker.proc is not None and worker.proc.poll() is None
