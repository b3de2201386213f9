"""contract §7 and §8 under SIGKILL: no call without a terminal reply, no approval asked twice,
no approved call run twice, and redelivered calls keep their ids."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from stream_adapter.core.approvals import ApprovalRecord
from stream_adapter.stream import faults
from stream_adapter.stream.topics import approval_requests_topic
from tests.harness import (
    Client,
    WorkerProcess,
    group_lag,
    read_all,
    unique,
    wait_for,
    wait_lag_zero,
)

TERMINAL = {"ok", "error", "already_done"}


async def _died(worker: WorkerProcess, timeout_s: float = 60) -> None:
    def dead() -> bool:
        assert worker.proc is not None
        return worker.proc.poll() is not None

    await wait_for(dead, timeout_s=timeout_s, what=f"{worker.name} to die")


def _ledger_lines(worker: WorkerProcess) -> list[dict]:
    if not worker.ledger.exists():
        return []
    return [json.loads(line) for line in worker.ledger.read_text().splitlines()]


async def _approval_records(worker: WorkerProcess, approval_id: str) -> list[ApprovalRecord]:
    s = worker.settings
    return [
        ApprovalRecord.from_bytes(m.value)
        for m in await read_all(s.bootstrap_servers, s.approvals_topic)
        if m.key == approval_id.encode()
    ]


async def test_a_killed_while_a_tool_runs(
    worker_factory: Callable[..., WorkerProcess], client: Client
) -> None:
    first = worker_factory(name="first")
    await first.ready()
    marker = await client.call("echo", {"m": 1}, key=b"K")
    running = await client.call("sleep", {"seconds": 1.5}, key=b"K")
    await client.reply_for(run_id=marker.run_id)  # the sleep is next on key K: it is running
    first.kill()
    assert not client.replies_for(run_id=running.run_id), "the sleep finished before the kill"

    second = worker_factory(name="second")
    await second.ready()
    reply = await client.reply_for(run_id=running.run_id, timeout_s=60)
    assert reply == {
        "status": "ok",
        "tool": "sleep",
        "run_id": running.run_id,
        "call_id": running.call_id,
        "result": {"slept": 1.5},
    }
    await wait_lag_zero(second.settings)


async def test_b_killed_after_the_reply_before_the_commit(
    worker_factory: Callable[..., WorkerProcess], client: Client
) -> None:
    first = worker_factory(name="first", STREAM_ADAPTER_CRASH_AT=faults.CALL_REPLIED)
    await first.ready()
    sent = await client.call("echo", {"b": 1}, key=b"B")
    await _died(first)
    second = worker_factory(name="second")
    await second.ready()
    await client.wait_replies(
        lambda rs: len(client.replies_for(run_id=sent.run_id)) >= 2,
        timeout_s=60,
        what="the redelivered call's reply",
    )
    replies = client.replies_for(run_id=sent.run_id)
    # At least once: the same call (same ids) answered again, never a different one.
    assert all(r == replies[0] for r in replies)
    assert replies[0]["call_id"] == sent.call_id
    await wait_lag_zero(second.settings)


@pytest.mark.parametrize("point", [faults.RUNNING, faults.APPROVED_RAN])
async def test_c_killed_while_an_approved_call_runs(
    worker_factory: Callable[..., WorkerProcess], client: Client, point: str
) -> None:
    """wire_funds is not idempotent: a run that died is never repeated."""
    first = worker_factory(name="first", STREAM_ADAPTER_CRASH_AT=point)
    await first.ready()
    run_id = unique("run")
    await client.call(
        "wire_funds", {"account": "c", "amount_cents": 7}, run_id=run_id, call_id=unique("call")
    )
    pending = await client.reply_for(status="pending_approval", run_id=run_id)
    await client.decide(pending["approval_id"], True)
    await _died(first)

    second = worker_factory(name="second")
    await second.ready()
    reply = await client.reply_for(run_id=run_id, status="already_done", timeout_s=60)
    assert reply["outcome"] == "unknown"
    assert len(_ledger_lines(second)) == (1 if point == faults.APPROVED_RAN else 0)
    # Nothing runs it again: neither another decision nor a resume.
    await client.decide(pending["approval_id"], True)
    await client.send({"approval_id": pending["approval_id"]})
    await client.wait_replies(
        lambda rs: len(client.replies_for(run_id=run_id, status="already_done")) >= 3,
        what="three already_done replies",
    )
    await wait_lag_zero(second.settings)
    assert len(_ledger_lines(second)) == (1 if point == faults.APPROVED_RAN else 0)
    for reply in client.replies_for(run_id=run_id, status="already_done"):
        assert reply["outcome"] == "unknown"


@pytest.mark.parametrize("point", [faults.RUNNING, faults.APPROVED_RAN])
async def test_c_an_idempotent_approved_call_killed_while_it_runs_finishes(
    worker_factory: Callable[..., WorkerProcess], client: Client, point: str
) -> None:
    """send_invoice is idempotent by call_id: the next worker runs it again and replies ok."""
    first = worker_factory(name="first", STREAM_ADAPTER_CRASH_AT=point)
    await first.ready()
    run_id, call_id = unique("run"), unique("call")
    await client.call(
        "send_invoice", {"customer": "c", "amount_cents": 7}, run_id=run_id, call_id=call_id
    )
    pending = await client.reply_for(status="pending_approval", run_id=run_id)
    # The park request committed first: redelivered, it would be answered `already_done`
    # (at least once, a redelivered request may answer again).
    requests = approval_requests_topic(first.settings)

    async def park_committed() -> bool:
        return await group_lag(first.settings, first.settings.app_id, requests) == 0

    await wait_for(park_committed, timeout_s=30, what="the park request's offset committed")
    await client.decide(pending["approval_id"], True)
    await _died(first)

    second = worker_factory(name="second")
    await second.ready()
    reply = await client.reply_for(run_id=run_id, status="ok", timeout_s=60)
    assert reply["result"] == {"invoiced": "c", "amount_cents": 7}
    assert [line["call_id"] for line in _ledger_lines(second)] == [call_id]
    await wait_lag_zero(second.settings)
    assert not client.replies_for(run_id=run_id, status="already_done")
    final = (await _approval_records(second, pending["approval_id"]))[-1]
    assert final.state == "done" and final.runs == 2, second.log_text()[-6000:]
    # A later resume answers from the stored outcome: nothing runs a third time.
    await client.send({"approval_id": pending["approval_id"]})
    done = await client.reply_for(run_id=run_id, status="already_done")
    assert done["outcome"]["status"] == "ok"
    assert len(_ledger_lines(second)) == 1


async def test_d_killed_between_parking_and_the_pending_reply(
    worker_factory: Callable[..., WorkerProcess], client: Client
) -> None:
    first = worker_factory(name="first", STREAM_ADAPTER_CRASH_AT=faults.PARKED)
    await first.ready()
    run_id = unique("run")
    await client.call(
        "send_invoice", {"customer": "d", "amount_cents": 9}, run_id=run_id, call_id=unique("call")
    )
    await _died(first)
    assert not client.replies_for(run_id=run_id)

    second = worker_factory(name="second")
    await second.ready()
    pending = await client.reply_for(status="pending_approval", run_id=run_id, timeout_s=60)
    records = await _approval_records(second, pending["approval_id"])
    assert [r.state for r in records] == ["pending"], "a second record was parked"
    await client.decide(pending["approval_id"], True)
    await client.reply_for(status="ok", run_id=run_id)
    assert len(_ledger_lines(second)) == 1
    await wait_lag_zero(second.settings)
    assert all(r["status"] in TERMINAL | {"pending_approval"} for r in client.replies)


async def test_a_job_failing_for_another_reason_is_retried_not_stuck(
    worker_factory: Callable[..., WorkerProcess], client: Client
) -> None:
    # The job raises once right after its reply was written (as a broker hiccup would):
    # it is tried again, the call is answered again with the same ids, and the partition's
    # commits move on instead of waiting for a restart.
    worker = worker_factory(STREAM_ADAPTER_FAIL_ONCE_AT=faults.CALL_REPLIED)
    await worker.ready()
    sent = await client.call("echo", {"f": 1}, key=b"F")
    await client.wait_replies(
        lambda rs: len(client.replies_for(run_id=sent.run_id)) >= 2,
        what="the retried job's second reply",
    )
    replies = client.replies_for(run_id=sent.run_id)
    assert all(r == replies[0] for r in replies) and replies[0]["status"] == "ok"
    after = await client.call("echo", {"after": 1}, key=b"F")
    await client.reply_for(run_id=after.run_id)
    await wait_lag_zero(worker.settings)
    assert "job failed; retrying" in worker.log_text()
    assert worker.proc is not None and worker.proc.poll() is None
