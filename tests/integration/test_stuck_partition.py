"""No crash loops from a fetch: a batch the worker cannot decode stops its partition only.

The other partitions go on being served; the stuck one is reported (one log line naming topic,
partition and offset, a metric, /health); the worker stays up; and once the cause is fixed (here
a worker that has the codec) every call is answered, those behind the batch included.
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Callable

import orjson
import pytest
from confluent_kafka import Producer

from stream_adapter.settings import Settings
from stream_adapter.stream.topics import create_topics
from tests.harness import Client, WorkerProcess, make_settings, unique, wait_for

pytestmark = pytest.mark.integration

STUCK = 1  # the partition the undecodable batch goes to


@pytest.fixture
def settings(kafka_bootstrap: str, tmp_path: object) -> Settings:
    from pathlib import Path

    result = make_settings(kafka_bootstrap, Path(str(tmp_path)), compression="gzip")
    asyncio.run(create_topics(result))
    return result


def _produce(settings: Settings, codec: str, calls: dict[str, int]) -> dict[int, int]:
    """Produce one echo call per call_id to its partition with codec; their offsets."""
    producer = Producer(
        {"bootstrap.servers": settings.bootstrap_servers, "compression.type": codec}
    )
    offsets: dict[int, int] = {}

    def done(err: object, message: object) -> None:
        assert err is None, err
        offsets[message.partition()] = min(  # type: ignore[attr-defined]
            offsets.get(message.partition(), 1 << 62),  # type: ignore[attr-defined]
            message.offset(),  # type: ignore[attr-defined]
        )

    for call_id, partition in calls.items():
        envelope = {"tool": "echo", "arguments": {}, "run_id": call_id, "call_id": call_id}
        producer.produce(
            settings.calls_topic, orjson.dumps(envelope), partition=partition, on_delivery=done
        )
    assert producer.flush(30) == 0
    return offsets


def _get(worker: WorkerProcess, path: str) -> str:
    url = f"http://127.0.0.1:{worker.settings.web_port}{path}"
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


async def test_an_undecodable_batch_stops_only_its_partition(
    settings: Settings, worker_factory: Callable[..., WorkerProcess], client: Client
) -> None:
    crippled = worker_factory(name="no-zstd", STREAM_ADAPTER_TOPOLOGY="tests.topologies.no_zstd")
    await crippled.ready()
    others = [p for p in range(settings.partitions) if p != STUCK]

    zstd_calls = {unique("zstd"): STUCK for _ in range(3)}
    stuck_at = _produce(settings, "zstd", zstd_calls)[STUCK]
    behind = {unique("behind"): STUCK}  # a readable call after the bad batch: held
    _produce(settings, "gzip", behind)
    served = {unique("served"): p for p in others for _ in range(2)}
    _produce(settings, "gzip", served)

    for call_id in served:
        await client.reply_for(call_id=call_id, timeout_s=60)

    def reported() -> bool:
        lines = [ln for ln in crippled.log_text().splitlines() if "partition stuck" in ln]
        return bool(lines)

    await wait_for(reported, timeout_s=30, what="the stuck partition's log line")
    line = next(ln for ln in crippled.log_text().splitlines() if "partition stuck" in ln)
    assert f"topic={settings.calls_topic}" in line
    assert f"partition={STUCK}" in line and f"offset={stuck_at}" in line
    assert "error_kind=UnsupportedCodecError" in line

    metrics = crippled.metrics()
    assert metrics[("stream_adapter_stuck_partitions", ())] == 1
    key = (
        "stream_adapter_stuck_partition_offset",
        (
            ("error_kind", "UnsupportedCodecError"),
            ("partition", str(STUCK)),
            ("topic", settings.calls_topic),
        ),
    )
    assert metrics[key] == stuck_at
    health = _get(crippled, "/health")
    assert health.startswith("degraded")
    assert f"{settings.calls_topic} partition {STUCK} at offset {stuck_at}" in health

    # Still serving the other partitions, still alive, and nothing on the stuck one ran.
    later = {unique("later"): p for p in others}
    _produce(settings, "gzip", later)
    for call_id in later:
        await client.reply_for(call_id=call_id, timeout_s=60)
    assert crippled.proc is not None and crippled.proc.poll() is None
    assert not {*zstd_calls, *behind} & {r["call_id"] for r in client.replies}
    assert crippled.terminate() == 0

    # The cause fixed (a worker with the codec): the held calls are answered, none lost.
    fixed = worker_factory(name="fixed")
    await fixed.ready()
    for call_id in [*zstd_calls, *behind]:
        await client.reply_for(call_id=call_id, timeout_s=60)
    assert _get(fixed, "/health") == "ok\n"
    answered = [r["call_id"] for r in client.replies]
    assert all(answered.count(c) == 1 for c in [*zstd_calls, *behind, *served, *later])
