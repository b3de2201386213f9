"""Two workers, one killed or stopped: the other takes over its calls and its approvals."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from tests.harness import Client, WorkerProcess, unique, wait_for, wait_lag_zero


async def test_survivor_takes_over_partitions_and_approvals(
    worker_factory: Callable[..., WorkerProcess], client: Client
) -> None:
    doomed, survivor = worker_factory(name="doomed"), worker_factory(name="survivor")
    await doomed.ready()
    await survivor.ready()
    run_ids = [unique("run") for _ in range(8)]
    for i, run_id in enumerate(run_ids):
        await client.call(
            "send_invoice",
            {"customer": f"c{i}", "amount_cents": i},
            run_id=run_id,
            call_id=unique("call"),
            key=run_id.encode(),
        )
    pending = [await client.reply_for(status="pending_approval", run_id=r) for r in run_ids]

    async def both_parked() -> bool:
        return "call parked" in doomed.log_text() and "call parked" in survivor.log_text()

    await wait_for(both_parked, timeout_s=60, what="each worker to hold some approvals")
    doomed.kill()

    for reply in pending:
        await client.decide(reply["approval_id"], True)
    for run_id in run_ids:
        ok = await client.reply_for(status="ok", run_id=run_id, timeout_s=90)
        assert ok["tool"] == "send_invoice"
    lines = [json.loads(x) for x in survivor.ledger.read_text().splitlines()]
    assert sorted(line["customer"] for line in lines) == [f"c{i}" for i in range(8)]
    calls = [await client.call("echo", {"n": n}, key=b"%d" % n) for n in range(8)]
    for sent in calls:
        await client.reply_for(status="ok", run_id=sent.run_id)
    await wait_lag_zero(survivor.settings)


async def test_sigterm_finishes_in_flight_calls_commits_and_leaves(
    worker_factory: Callable[..., WorkerProcess], client: Client
) -> None:
    first = worker_factory(name="first")
    await first.ready()
    marker = await client.call("echo", {"m": 1}, key=b"T")
    slow = await client.call("sleep", {"seconds": 1.5}, key=b"T")
    await client.reply_for(run_id=marker.run_id)
    # The marker's reply can come before the sleep is even fetched (inline replies are fast):
    # wait until the worker reports a tool running.
    await wait_for(
        lambda: asyncio.to_thread(_tools_running, first),
        timeout_s=30,
        what="the sleep call to be running",
        interval_s=0.05,
    )
    assert first.terminate(timeout_s=60) == 0
    await client.wait_replies(
        lambda rs: bool(client.replies_for(run_id=slow.run_id)), what="the in-flight call's reply"
    )

    second = worker_factory(name="second")
    await second.ready()
    after = await client.call("echo", {"after": True}, key=b"T")
    await client.reply_for(run_id=after.run_id)
    await wait_lag_zero(second.settings)
    replies = client.replies_for(run_id=slow.run_id)
    assert len(replies) == 1, "the in-flight call was neither finished once nor handed back"
    assert replies[0]["status"] == "ok"


def _tools_running(worker: WorkerProcess) -> bool:
    """True when the worker's metrics show a tool running now."""
    return worker.metrics().get(("stream_adapter_calls_in_flight", ()), 0.0) >= 1
