"""The host recipes in examples/ run offline: queue recipes over an in-process fake queue."""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from examples import queues, serverless
from examples.backend import executor
from stream_adapter import ToolFailed, ToolNotFound, ToolUsageError, record_decision
from stream_adapter.core.ids import derive_ids
from tests.fake_queue import FakeQueue


@pytest.fixture(autouse=True)
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setenv("STREAM_ADAPTER_DEMO_LEDGER", str(path))
    return path


def unique() -> str:
    return uuid.uuid4().hex


def envelope(tool: str, **arguments: Any) -> str:
    return json.dumps({"tool": tool, "arguments": arguments})


async def test_consumer_acks_dead_letters_and_leaves_retryable_for_redelivery() -> None:
    queue = FakeQueue()
    echo = queue.send(envelope("echo", x=1))
    invoice = queue.send(envelope("send_invoice", customer=unique(), amount_cents=5))
    broken = queue.send(b"{not json")
    hidden = queue.send(envelope("admin_reset"))
    denied_args = queue.send(envelope("add", a="1", b=2))
    flaky = queue.send(envelope("flaky", key=unique(), fail_times=1))

    replies = await queues.consume_once(queue)
    assert [r["status"] for r in replies] == ["ok", "pending_approval"]
    assert queue.acked == [echo, invoice]
    assert queue.dead == [broken, hidden, denied_args]
    assert list(queue.in_flight.values()) == [flaky]  # retryable: not acked

    queue.expire()
    [reply] = await queues.consume_once(queue)
    assert reply["status"] == "ok" and reply["result"] == {"attempts": 2}
    assert queue.acked[-1] == flaky and queue.deliveries[flaky.id] == 2
    run_id, call_id = derive_ids(flaky.id, "queue")
    assert (reply["run_id"], reply["call_id"]) == (run_id, call_id)  # the same call again


async def test_a_resume_runs_once_and_its_redelivery_is_acked(ledger: Path) -> None:
    queue = FakeQueue()
    queue.send(envelope("send_invoice", customer=unique(), amount_cents=7))
    [parked] = await queues.consume_once(queue)
    status, _ = await record_decision(
        executor(), parked["approval_id"], reviewer="ann", approved=True
    )
    assert status == 200
    resume = json.dumps({"approval_id": parked["approval_id"]})
    queue.send(resume)
    queue.send(resume)  # a duplicate delivery of the resume
    first, second = await queues.consume_once(queue)
    assert first["status"] == "ok" and second["status"] == "already_done"
    assert second["outcome"] == first
    assert not queue.dead and not queue.in_flight
    assert len(ledger.read_text().splitlines()) == 1  # noqa: ASYNC240 (a tiny test file)


def test_sync_job_on_the_warm_loop() -> None:
    job_id = unique()
    first = queues.tool_job({"tool": "add", "arguments": {"a": 2, "b": 3}}, job_id=job_id)
    again = queues.tool_job({"tool": "add", "arguments": {"a": 2, "b": 3}}, job_id=job_id)
    assert first["result"] == 5 and first == again  # a retried job is the same call
    assert first["run_id"] == derive_ids(job_id, "job")[0]
    with pytest.raises(ToolNotFound):  # errors raise, so the job runner records them
        queues.tool_job({"tool": "admin_reset", "arguments": {}})
    loop = queues.RUNNER.loop
    queues.tool_job({"tool": "echo", "arguments": {}})
    assert queues.RUNNER.loop is loop


async def test_workflow_activity() -> None:
    activity_id = f"wf-{unique()}/activity-1"
    reply = await queues.tool_activity(
        {"tool": "send_invoice", "arguments": {"customer": "c", "amount_cents": 1}},
        activity_id=activity_id,
    )
    assert reply["status"] == "pending_approval"  # the workflow waits for a signal
    again = await queues.tool_activity(
        {"tool": "send_invoice", "arguments": {"customer": "c", "amount_cents": 1}},
        activity_id=activity_id,
    )
    assert again["approval_id"] == reply["approval_id"]  # a retried attempt asks once


def push_body(data: bytes, message_id: str) -> dict[str, Any]:
    return {
        "message": {
            "data": base64.b64encode(data).decode(),
            "messageId": message_id,
            "message_id": message_id,
            "publishTime": "2025-01-01T00:00:00.000Z",
            "attributes": {},
        },
        "subscription": "projects/demo/subscriptions/tool-calls-push",
    }


async def test_pubsub_push_returns_the_reply_and_raises_errors() -> None:
    message_id = str(uuid.uuid4().int)[:16]
    reply = await queues.pubsub_push(push_body(envelope("echo", y=2).encode(), message_id))
    assert reply["status"] == "ok" and reply["result"] == {"y": 2}
    assert reply["call_id"] == derive_ids(message_id, "pubsub")[1]
    with pytest.raises(ToolUsageError):
        await queues.pubsub_push({"message": {"data": "%%%"}})
    with pytest.raises(ToolFailed) as caught:
        await queues.pubsub_push(
            push_body(envelope("flaky", key=unique(), fail_times=1).encode(), unique())
        )
    assert caught.value.retryable


async def test_pubsub_push_response() -> None:
    message_id = str(uuid.uuid4().int)[:16]
    status, reply = await queues.pubsub_push_response(
        push_body(envelope("echo", y=2).encode(), message_id)
    )
    assert status == 200 and reply["result"] == {"y": 2}
    status, problem = await queues.pubsub_push_response({"message": {"data": "%%%"}})
    assert status == 400 and problem["kind"] == "ToolUsageError"
    status, problem = await queues.pubsub_push_response(
        push_body(envelope("flaky", key=unique(), fail_times=1).encode(), unique())
    )
    assert status == 500 and problem["retryable"]  # non-2xx: Pub/Sub pushes it again


async def test_async_http_function() -> None:
    status, reply = await serverless.tool_function({"tool": "add", "arguments": {"a": 1, "b": 1}})
    assert (status, reply["result"]) == (200, 2)
    status, problem = await serverless.tool_function({"tool": "add", "arguments": {"a": "x"}})
    assert status == 422 and problem["kind"] == "ToolUsageError"


def test_review_step_sends_a_resume_only_when_approved() -> None:
    sent: list[dict[str, Any]] = []
    pending = serverless.handler(
        {"tool": "send_invoice", "arguments": {"customer": unique(), "amount_cents": 3}}
    )
    status, _ = serverless.review(
        pending["approval_id"], reviewer="ann", approved=False, send=sent.append
    )
    assert status == 200 and sent == []
    status, _ = serverless.review(
        pending["approval_id"], reviewer="bob", approved=True, send=sent.append
    )
    assert status == 409 and sent == []  # the first decision wins
