"""Unknown outcomes reach a person: a non-idempotent approved call whose worker died while it
ran becomes `unknown` on the approvals table, and a signed resolution on `approval-decisions`
settles it ("it ran") or runs it once more ("it did not run"); the agent gets the final reply."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from stream_adapter.approvals import ApprovalRecord, Resolution, utc_now
from stream_adapter.review.decide import decision_message
from stream_adapter.signing import DecisionKeys
from stream_adapter.stream import faults
from tests.harness import Client, WorkerProcess, dead_letters, read_all, unique, wait_for

KEYS = "k1:unknown-outcome-secret"


async def _died(worker: WorkerProcess) -> None:
    def dead() -> bool:
        assert worker.proc is not None
        return worker.proc.poll() is not None

    await wait_for(dead, timeout_s=60, what=f"{worker.name} to die")


def _ledger(worker: WorkerProcess) -> list[dict[str, Any]]:
    if not worker.ledger.exists():
        return []
    return [json.loads(line) for line in worker.ledger.read_text().splitlines()]


async def _record(worker: WorkerProcess, approval_id: str) -> ApprovalRecord:
    s = worker.settings
    return [
        ApprovalRecord.from_bytes(m.value)
        for m in await read_all(s.bootstrap_servers, s.approvals_topic)
        if m.key == approval_id.encode()
    ][-1]


async def _signed(client: Client, approval_id: str, body: dict[str, Any]) -> None:
    """Send what `approvals decide`/`resolve` would send, signed with the workers' key."""
    keys = DecisionKeys.parse(KEYS)
    if "resolution" in body:
        value, headers = decision_message(
            Resolution(approval_id=approval_id, decided_at=utc_now(), **body), keys
        )
    else:
        value = json.dumps({"approval_id": approval_id, **body}).encode()
        headers = list(keys.sign(value).items())
    await client.send(
        value,
        key=approval_id.encode(),
        topic=client.settings.decisions_topic,
        headers=headers,
    )


async def _approve_and_die(
    worker_factory: Callable[..., WorkerProcess], client: Client, name: str, account: str
) -> tuple[str, str, str]:
    """A worker that dies right after an approved wire_funds call's running mark is durable."""
    worker = worker_factory(
        name=name, STREAM_ADAPTER_DECISION_KEYS=KEYS, STREAM_ADAPTER_CRASH_AT=faults.RUNNING
    )
    await worker.ready()
    run_id, call_id = unique("run"), unique("call")
    await client.call(
        "wire_funds", {"account": account, "amount_cents": 5}, run_id=run_id, call_id=call_id
    )
    pending = await client.reply_for(status="pending_approval", run_id=run_id)
    await _signed(client, pending["approval_id"], {"approved": True, "reviewer": "ann"})
    await _died(worker)
    return pending["approval_id"], run_id, call_id


async def test_an_unknown_outcome_is_resolved_both_ways_and_the_agent_gets_the_final_reply(
    worker_factory: Callable[..., WorkerProcess], client: Client
) -> None:
    ran_id, ran_run, _ = await _approve_and_die(worker_factory, client, "first", "a")
    # The next worker answers the redelivered decision unknown, then dies on the second call.
    not_run_id, not_run_run, not_run_call = await _approve_and_die(
        worker_factory, client, "second", "b"
    )
    third = worker_factory(name="third", STREAM_ADAPTER_DECISION_KEYS=KEYS)
    await third.ready()
    for run_id in (ran_run, not_run_run):
        reply = await client.reply_for(run_id=run_id, status="already_done", timeout_s=60)
        assert reply["outcome"] == "unknown"
    for approval_id, worker in ((ran_id, "first"), (not_run_id, "second")):
        record = await _record(third, approval_id)
        assert record.state == "unknown" and record.unknown_at, third.log_text()[-4000:]
        assert (record.started_by or "").startswith(f"kafka:{third.settings.app_id}@")
        assert record.runs == 1, worker
    assert _ledger(third) == []  # neither call's tool started

    def two_unknown() -> bool:
        return third.metrics().get(("stream_adapter_unknown_outcomes", ())) == 2

    await wait_for(two_unknown, timeout_s=30, what="the unknown outcomes gauge at 2")

    # An unsigned resolution is refused: the record stays unknown.
    await client.send(
        {"approval_id": ran_id, "resolution": "ran", "reviewer": "mallory"},
        key=ran_id.encode(),
        topic=client.settings.decisions_topic,
    )
    await dead_letters(third.settings, at_least=1)
    assert (await _record(third, ran_id)).state == "unknown"

    # "It ran": the agent gets an ok reply carrying the person's result; nothing runs.
    await _signed(
        client, ran_id, {"resolution": "ran", "reviewer": "bob", "result": {"wired": "a"}}
    )
    ok = await client.reply_for(run_id=ran_run, status="ok", timeout_s=60)
    assert ok["result"] == {"wired": "a"} and ok["resolved_by"] == "bob"
    assert ok["approval_id"] == ran_id
    assert (await _record(third, ran_id)).state == "done"

    # "It did not run": one fresh run, whose reply reaches the agent.
    await _signed(client, not_run_id, {"resolution": "not_run", "reviewer": "bob"})
    fresh = await client.reply_for(run_id=not_run_run, status="ok", timeout_s=60)
    assert fresh["result"] == {"wired": "b", "amount_cents": 5}
    assert [line["call_id"] for line in _ledger(third)] == [not_run_call]
    final = await _record(third, not_run_id)
    assert final.state == "done" and final.runs == 2 and final.resolution == "not_run"

    # A second "it did not run" is refused: still one ledger line, no second ok reply.
    await _signed(client, not_run_id, {"resolution": "not_run", "reviewer": "bob"})
    await dead_letters(third.settings, at_least=2)
    assert len(client.replies_for(run_id=not_run_run, status="ok")) == 1
    assert [line["call_id"] for line in _ledger(third)] == [not_run_call]

    def none_unknown() -> bool:
        return third.metrics().get(("stream_adapter_unknown_outcomes", ())) == 0

    await wait_for(none_unknown, timeout_s=30, what="the unknown outcomes gauge at 0")
