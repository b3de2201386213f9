"""The worker's approvals table: settled records leave after SETTLED_RETENTION_S, pending ones
expire after PENDING_EXPIRY_S, at either processing guarantee.

Within the retention a redelivered resume still answers `already_done`; past it the worker's
sweep writes a tombstone, read here from the changelog with an independent client (librdkafka),
and the record is gone from the worker's table (a resume finds no approval). A pending approval
is never removed by the retention. An expired approval answers its agent ApprovalExpired, and a
late decision on the decisions topic is answered like any later decision, with nothing run.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from stream_adapter.settings import Settings
from tests.harness import Client, WorkerProcess, unique, wait_for

pytestmark = pytest.mark.integration

RETENTION_S = "8"
"""Short, yet long enough for a redelivery right after the call was answered."""
FAST_SWEEP = {"STREAM_ADAPTER_APPROVALS_SWEEP_INTERVAL_S": "0.5"}
GUARANTEES = ["at_least_once", "exactly_once"]


@pytest.fixture
async def reader(settings: Settings) -> AsyncIterator[Client]:
    async with Client(settings, read_committed=True) as client:
        yield client


def _guarantee(guarantee: str) -> dict[str, str]:
    return {"STREAM_ADAPTER_PROCESSING_GUARANTEE": guarantee}


def _changelog(settings: Settings, approval_id: str) -> list[bytes | None]:
    """The values of approval_id's key on the approvals changelog, read_committed, in order
    (None: a tombstone), by a librdkafka consumer of its own."""
    consumer = Consumer(
        {
            "bootstrap.servers": settings.bootstrap_servers,
            "group.id": unique("changelog-reader"),
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        topic = settings.approvals_topic
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        tps = [TopicPartition(topic, p, 0) for p in partitions]
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in partitions}  # fmt: skip
        consumer.assign(tps)
        values: list[bytes | None] = []
        left = {p for p, end in ends.items() if end > 0}
        deadline = time.monotonic() + 30
        while left and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            ours = message is not None and message.error() is None
            if ours and message.key() == approval_id.encode():
                values.append(message.value())
            # Positions pass transaction markers too, which no message shows.
            for tp in consumer.position([TopicPartition(topic, p) for p in left]):
                if tp.offset >= ends[tp.partition]:
                    left.discard(tp.partition)
        assert not left, f"changelog partitions {left} not read to their end"
        return values
    finally:
        consumer.close()


async def _park(client: Client) -> dict[str, Any]:
    run_id = unique("run")
    await client.call(
        "send_invoice",
        {"customer": "acme", "amount_cents": 700},
        run_id=run_id,
        call_id=unique("call"),
        key=run_id.encode(),
    )
    return await client.reply_for(status="pending_approval", run_id=run_id, timeout_s=60)


def _ledger(worker: WorkerProcess) -> list[dict[str, Any]]:
    path = worker.ledger
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("guarantee", GUARANTEES)
async def test_a_settled_record_leaves_the_table_after_its_retention(
    guarantee: str,
    settings: Settings,
    worker_factory: Callable[..., WorkerProcess],
    reader: Client,
) -> None:
    worker = worker_factory(
        STREAM_ADAPTER_SETTLED_RETENTION_S=RETENTION_S, **FAST_SWEEP, **_guarantee(guarantee)
    )
    await worker.ready()
    done, waiting = await _park(reader), await _park(reader)
    approval_id = done["approval_id"]
    await reader.decide(approval_id, True)
    ok = await reader.reply_for(status="ok", run_id=done["run_id"], timeout_s=60)

    # Within the retention: a redelivered resume answers from the record.
    await reader.send({"approval_id": approval_id})
    again = await reader.reply_for(status="already_done", run_id=done["run_id"], timeout_s=60)
    assert again["outcome"] == ok

    # Past it: a tombstone follows the record on the changelog ...
    def tombstoned() -> bool:
        values = _changelog(settings, approval_id)
        return bool(values) and values[-1] is None

    await wait_for(tombstoned, timeout_s=90, what="the settled record's tombstone", interval_s=1)
    states = [json.loads(v)["state"] for v in _changelog(settings, approval_id) if v is not None]
    assert states == ["pending", "running", "done"]
    # ... and the worker's table no longer holds it: a resume finds no approval.
    await reader.send({"approval_id": approval_id})
    missing = await reader.reply_for(status="error", approval_id=approval_id, timeout_s=60)
    assert missing["error"]["kind"] == "ApprovalNotFound"
    assert [line["call_id"] for line in _ledger(worker)] == [ok["call_id"]]  # ran once

    # A pending approval is never removed by the retention: it is still there to decide.
    assert None not in _changelog(settings, waiting["approval_id"])
    await reader.decide(waiting["approval_id"], True)
    await reader.reply_for(status="ok", run_id=waiting["run_id"], timeout_s=60)


@pytest.mark.parametrize("guarantee", GUARANTEES)
async def test_an_approval_nobody_decides_expires_and_a_late_decision_runs_nothing(
    guarantee: str,
    settings: Settings,
    worker_factory: Callable[..., WorkerProcess],
    reader: Client,
) -> None:
    worker = worker_factory(
        STREAM_ADAPTER_PENDING_EXPIRY_S="2", **FAST_SWEEP, **_guarantee(guarantee)
    )
    await worker.ready()
    pending = await _park(reader)
    expired = await reader.reply_for(status="error", run_id=pending["run_id"], timeout_s=60)
    assert expired["approval_id"] == pending["approval_id"]
    problem = expired["error"]
    assert (problem["kind"], problem["status"], problem["retryable"]) == (
        "ApprovalExpired",
        410,
        False,
    )

    # A late decision is answered like any later one: already_done with the expiry, no run.
    await reader.decide(pending["approval_id"], True)
    late = await reader.reply_for(status="already_done", run_id=pending["run_id"], timeout_s=60)
    assert late["outcome"] == expired
    # A resume gets the expiry again; the worker is alive and serves other calls.
    await reader.send({"approval_id": pending["approval_id"]})
    await reader.wait_replies(
        lambda rs: len([r for r in rs if r == expired]) == 2, what="the expiry answered again"
    )
    echo = await reader.call("echo", {"alive": True})
    await reader.reply_for(status="ok", run_id=echo.run_id, timeout_s=60)
    assert _ledger(worker) == []
    assert worker.proc is not None and worker.proc.poll() is None
    states = [
        json.loads(v)["state"]
        for v in _changelog(settings, pending["approval_id"])
        if v is not None
    ]
    assert states == ["pending", "expired"]
