"""processing_guarantee=exactly_once: replies, table updates and offsets in one transaction.

A read_committed reader of the replies sees each reply once, also when the worker is killed
after producing a reply and before committing; approved calls still run at most once.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable

import pytest

from stream_adapter.settings import Settings
from stream_adapter.stream import faults
from tests.harness import Client, WorkerProcess, unique, wait_for, wait_lag_zero

EOS = {"STREAM_ADAPTER_PROCESSING_GUARANTEE": "exactly_once"}


@pytest.fixture
async def committed(settings: Settings) -> AsyncIterator[Client]:
    async with Client(settings, read_committed=True) as reader:
        yield reader


async def _approved_then_killed(
    worker_factory: Callable[..., WorkerProcess],
    committed: Client,
    point: str,
    tool: str,
    arguments: dict[str, object],
) -> tuple[str, WorkerProcess]:
    """Call tool and approve it on an exactly-once worker that dies at crash point; the call's
    run_id and the next worker, ready."""
    first = worker_factory(name="first", STREAM_ADAPTER_CRASH_AT=point, **EOS)
    await first.ready()
    run_id = unique("run")
    await committed.call(tool, arguments, run_id=run_id, call_id=unique("call"))
    pending = await committed.reply_for(status="pending_approval", run_id=run_id)
    await committed.decide(pending["approval_id"], True)

    def dead() -> bool:
        return first.proc is not None and first.proc.poll() is not None

    await wait_for(dead, timeout_s=60, what="the first worker to die")
    second = worker_factory(name="second", **EOS)
    await second.ready()
    return run_id, second


async def test_replies_are_committed_once_across_a_crash_before_commit(
    worker_factory: Callable[..., WorkerProcess], committed: Client
) -> None:
    first = worker_factory(name="first", STREAM_ADAPTER_CRASH_AT=faults.CALL_REPLIED, **EOS)
    await first.ready()
    sent = await committed.call("echo", {"eos": 1}, key=b"E")

    def dead() -> bool:
        return first.proc is not None and first.proc.poll() is not None

    await wait_for(dead, timeout_s=60, what="the first worker to die")
    second = worker_factory(name="second", **EOS)
    await second.ready()
    later = [await committed.call("echo", {"n": n}, key=b"E") for n in range(3)]
    for s in later:
        await committed.reply_for(run_id=s.run_id, timeout_s=60)
    await wait_lag_zero(second.settings)
    replies = committed.replies_for(run_id=sent.run_id)
    assert len(replies) == 1 and replies[0]["result"] == {"eos": 1}
    assert all(len(committed.replies_for(run_id=s.run_id)) == 1 for s in later)


async def test_approved_call_runs_once_in_exactly_once_mode(
    worker_factory: Callable[..., WorkerProcess], committed: Client
) -> None:
    """wire_funds is not idempotent: killed after it ran, it is never run again."""
    run_id, second = await _approved_then_killed(
        worker_factory,
        committed,
        faults.APPROVED_RAN,
        "wire_funds",
        {"account": "e", "amount_cents": 3},
    )
    done = await committed.reply_for(status="already_done", run_id=run_id, timeout_s=60)
    assert done["outcome"] == "unknown"
    await wait_lag_zero(second.settings)
    lines = [json.loads(x) for x in second.ledger.read_text().splitlines()]
    assert len(lines) == 1
    assert len(committed.replies_for(run_id=run_id, status="pending_approval")) == 1


async def test_an_outcome_stored_before_a_crash_is_not_lost_with_the_transaction(
    worker_factory: Callable[..., WorkerProcess], committed: Client
) -> None:
    """wire_funds ran and its outcome was stored, then the worker died before its commit: the
    next worker answers with that outcome, not `unknown`, and never runs it again."""
    run_id, second = await _approved_then_killed(
        worker_factory,
        committed,
        faults.APPROVED_DONE,
        "wire_funds",
        {"account": "d", "amount_cents": 4},
    )
    done = await committed.reply_for(status="already_done", run_id=run_id, timeout_s=60)
    assert done["outcome"]["status"] == "ok", done
    assert done["outcome"]["result"]["amount_cents"] == 4, done
    await wait_lag_zero(second.settings)
    lines = [json.loads(x) for x in second.ledger.read_text().splitlines()]
    assert len(lines) == 1
    assert [r["status"] for r in committed.replies_for(run_id=run_id)] == [
        "pending_approval",
        "already_done",
    ]


async def test_an_idempotent_approved_call_killed_after_it_ran_finishes_once_exactly_once(
    worker_factory: Callable[..., WorkerProcess], committed: Client
) -> None:
    """send_invoice is idempotent: the next worker runs it again; a read_committed reader sees
    one pending_approval and one ok reply, and the ledger one line."""
    run_id, second = await _approved_then_killed(
        worker_factory,
        committed,
        faults.APPROVED_RAN,
        "send_invoice",
        {"customer": "e", "amount_cents": 3},
    )
    await committed.reply_for(status="ok", run_id=run_id, timeout_s=60)
    await wait_lag_zero(second.settings)
    lines = [json.loads(x) for x in second.ledger.read_text().splitlines()]
    assert len(lines) == 1
    assert [r["status"] for r in committed.replies_for(run_id=run_id)] == [
        "pending_approval",
        "ok",
    ]
