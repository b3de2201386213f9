"""MAX_PENDING_PER_SOURCE over a real broker: a flood of parks stops at the cap with a typed,
retryable error reply and a dead letter (nothing parked, the partition moves on), and a
decided approval makes room again."""

from __future__ import annotations

from stream_adapter.core.approvals import ApprovalRecord
from tests.harness import Client, WorkerProcess, dead_letters, read_all, unique

CAP = 3


async def call(client: Client) -> str:
    run_id = unique("run")
    await client.call(
        "send_invoice",
        {"customer": "acme", "amount_cents": 1},  # the same call again and again
        run_id=run_id,
        call_id="c",
        key=b"one-agent",
    )
    return run_id


async def test_parks_past_the_cap_are_refused_typed_and_room_comes_back(
    worker_factory: type[WorkerProcess], client: Client
) -> None:
    worker = worker_factory(STREAM_ADAPTER_MAX_PENDING_PER_SOURCE=str(CAP))  # type: ignore[call-arg]
    await worker.ready()
    parked = [await call(client) for _ in range(CAP)]
    pending = [await client.reply_for(status="pending_approval", run_id=r) for r in parked]
    over = [await call(client) for _ in range(2)]
    for run_id in over:
        reply = await client.reply_for(status="error", run_id=run_id)
        error = reply["error"]
        assert (error["kind"], error["status"], error["retryable"]) == (
            "TooManyPending",
            429,
            True,
        )
    letters = await dead_letters(client.settings)
    assert len(letters) == 2
    assert {dict(m.headers)["error-kind"] for m in letters} == {b"TooManyPending"}
    # An echo on the same key still runs: the partition moves on.
    echo = unique("run")
    await client.call("echo", {"text": "hi"}, run_id=echo, call_id="e", key=b"one-agent")
    await client.reply_for(status="ok", run_id=echo)
    # Nothing was parked for the refused calls.
    settings = worker.settings
    records = [
        ApprovalRecord.from_bytes(m.value)
        for m in await read_all(settings.bootstrap_servers, settings.approvals_topic)
        if m.value is not None
    ]
    assert {r.run_id for r in records} == set(parked)
    # A decision makes room for one more.
    await client.decide(pending[0]["approval_id"], False)
    await client.reply_for(status="error", run_id=parked[0])  # ApprovalDenied

    again = await call(client)
    await client.reply_for(status="pending_approval", run_id=again)
