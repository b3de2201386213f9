"""Records the worker writes stay within the limits it enforces: a big call never stalls its
partition, at either guarantee (contract §10, "Limits").

A `send_invoice` of 693 KB of incompressible text parks by reference (its park request does not
carry the message a second time), and its approved run, whose result and arguments together are
too big for one approvals record, settles with a small `RecordTooLarge` outcome; an `echo` on
the same key behind it is answered all along.
"""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator

import pytest

from stream_adapter.core.executor import MAX_RESULT_BYTES
from stream_adapter.settings import Settings
from tests.harness import Client, WorkerProcess, unique, wait_lag_zero

GUARANTEES = {
    "at_least_once": {},
    "exactly_once": {"STREAM_ADAPTER_PROCESSING_GUARANTEE": "exactly_once"},
}


def _incompressible(size: int) -> str:
    return base64.b64encode(os.urandom(size * 3 // 4)).decode()[:size]


@pytest.fixture
async def reader(settings: Settings) -> AsyncIterator[Client]:
    async with Client(settings, read_committed=True) as client:
        yield client


@pytest.mark.parametrize("guarantee", sorted(GUARANTEES))
async def test_a_big_confirm_call_parks_and_its_partition_moves_on(
    guarantee: str, worker_factory: type[WorkerProcess], reader: Client
) -> None:
    worker = worker_factory(**GUARANTEES[guarantee])  # type: ignore[call-arg]
    await worker.ready()
    key = unique("agent").encode()
    big_run, echo_run, after_run = unique("run"), unique("run"), unique("run")
    customer = _incompressible(693_000)
    await reader.call(
        "send_invoice",
        {"customer": customer, "amount_cents": 100},
        run_id=big_run,
        call_id=unique("call"),
        key=key,
    )
    await reader.call("echo", {"n": 1}, run_id=echo_run, call_id=unique("call"), key=key)

    echoed = await reader.reply_for(run_id=echo_run, timeout_s=90)
    assert echoed["status"] == "ok"
    pending = await reader.reply_for(run_id=big_run, status="pending_approval", timeout_s=30)

    await reader.decide(pending["approval_id"], True)
    outcome = await reader.reply_for(run_id=big_run, status="error", timeout_s=60)
    # The invoice went out; its result (the customer again) does not fit next to the
    # arguments in one approvals record, so the stored outcome is a small typed error.
    assert outcome["error"]["kind"] == "RecordTooLarge"
    assert outcome["approval_id"] == pending["approval_id"]
    assert '"send_invoice"' in worker.ledger.read_text()

    await reader.call("echo", {"n": 2}, run_id=after_run, call_id=unique("call"), key=key)
    assert (await reader.reply_for(run_id=after_run, timeout_s=60))["status"] == "ok"
    # A resume answers from the stored outcome: the same small error, nothing runs again.
    await reader.send({"approval_id": pending["approval_id"]}, key=key)
    await reader.wait_replies(
        lambda replies: len([r for r in replies if r.get("run_id") == big_run]) >= 3,
        timeout_s=60,
        what="the resume's reply",
    )
    again = [r for r in reader.replies if r.get("run_id") == big_run][-1]
    assert again["status"] in ("error", "already_done"), again
    await wait_lag_zero(worker.settings, timeout_s=60)


@pytest.mark.parametrize("guarantee", sorted(GUARANTEES))
async def test_the_largest_results_are_answered_or_kept_as_a_small_error(
    guarantee: str, worker_factory: type[WorkerProcess], reader: Client
) -> None:
    worker = worker_factory(  # type: ignore[call-arg]
        STREAM_ADAPTER_TOPOLOGY="tests.topologies.big", **GUARANTEES[guarantee]
    )
    await worker.ready()
    key = unique("agent").encode()
    plain, approved, behind = unique("run"), unique("run"), unique("run")
    size = MAX_RESULT_BYTES - 64  # the largest result a tool may return
    await reader.call("grow", {"size": size}, run_id=plain, call_id=unique("c"), key=key)
    bulky = {"size": size, "pad": _incompressible(400_000)}
    await reader.call("grow_approved", bulky, run_id=approved, call_id=unique("c"), key=key)
    await reader.call("echo", {"text": "behind"}, run_id=behind, call_id=unique("c"), key=key)

    # A reply of 1 MiB and its ids: over the broker's default limit, within the topics'.
    answered = await reader.reply_for(run_id=plain, timeout_s=90)
    assert answered["status"] == "ok" and len(answered["result"]) == size
    assert (await reader.reply_for(run_id=behind, timeout_s=30))["status"] == "ok"

    # Arguments and result together exceed an approvals record: a small error is kept.
    pending = await reader.reply_for(run_id=approved, status="pending_approval", timeout_s=30)
    await reader.decide(pending["approval_id"], True)
    outcome = await reader.reply_for(run_id=approved, status="error", timeout_s=60)
    assert outcome["error"]["kind"] == "RecordTooLarge"
    await wait_lag_zero(worker.settings, timeout_s=60)
