"""contract §7 end to end: parking, decisions, resumes, first decision wins, signing."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from stream_adapter.core.approvals import ApprovalRecord
from stream_adapter.core.signing import DecisionKeys
from tests.harness import Client, WorkerProcess, bound_signature, dead_letters, read_all, unique


def _ledger(worker: WorkerProcess) -> list[dict]:
    path: Path = worker.ledger
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def _park(client: Client, customer: str = "acme") -> dict:
    run_id, call_id = unique("run"), unique("call")
    await client.call(
        "send_invoice",
        {"customer": customer, "amount_cents": 1200},
        run_id=run_id,
        call_id=call_id,
        key=run_id.encode(),
    )
    return await client.reply_for(status="pending_approval", run_id=run_id)


async def _records(worker: WorkerProcess, approval_id: str) -> list[ApprovalRecord]:
    settings = worker.settings
    messages = await read_all(settings.bootstrap_servers, settings.approvals_topic)
    return [ApprovalRecord.from_bytes(m.value) for m in messages if m.key == approval_id.encode()]


async def test_approved_call_runs_once_and_later_decisions_are_already_done(
    worker: WorkerProcess, client: Client
) -> None:
    pending = await _park(client)
    approval_id, run_id = pending["approval_id"], pending["run_id"]
    assert pending["tool"] == "send_invoice"

    await client.decide(approval_id, True)
    ok = await client.reply_for(status="ok", run_id=run_id)
    assert ok["approval_id"] == approval_id
    assert ok["result"] == {"invoiced": "acme", "amount_cents": 1200}

    await client.decide(approval_id, False, reviewer="bob")  # conflicting: ignored
    await client.send({"approval_id": approval_id})  # a resume after the fact
    await client.wait_replies(
        lambda rs: (
            len([r for r in rs if r["run_id"] == run_id and r["status"] == "already_done"]) == 2
        ),
        what="two already_done replies",
    )
    for reply in client.replies_for(run_id=run_id, status="already_done"):
        assert reply["outcome"] == ok
    assert [line["call_id"] for line in _ledger(worker)] == [ok["call_id"]]

    states = [r.state for r in await _records(worker, approval_id)]
    assert states == ["pending", "running", "done"]
    final = (await _records(worker, approval_id))[-1]
    assert final.reviewer == "ann" and final.reply == ok


async def test_redelivered_confirm_call_asks_once(worker: WorkerProcess, client: Client) -> None:
    run_id, call_id = unique("run"), unique("call")
    for _ in range(2):
        await client.call(
            "send_invoice", {"customer": "x", "amount_cents": 1}, run_id=run_id, call_id=call_id
        )
    await client.wait_replies(
        lambda rs: len([r for r in rs if r["run_id"] == run_id]) == 2, what="two replies"
    )
    replies = client.replies_for(run_id=run_id)
    assert {r["status"] for r in replies} == {"pending_approval"}
    assert replies[0]["approval_id"] == replies[1]["approval_id"]
    assert len(await _records(worker, replies[0]["approval_id"])) == 1


async def test_denied_call_gets_approval_denied(worker: WorkerProcess, client: Client) -> None:
    pending = await _park(client)
    await client.decide(pending["approval_id"], False, reason="not this month")
    reply = await client.reply_for(status="error", run_id=pending["run_id"])
    error = reply["error"]
    assert (error["kind"], error["status"]) == ("ApprovalDenied", 403)
    assert "not this month" not in orjson.dumps(reply).decode()
    assert _ledger(worker) == []


async def test_resume_of_pending_replies_pending(client: Client, worker: WorkerProcess) -> None:
    pending = await _park(client)
    await client.send({"approval_id": pending["approval_id"]})
    await client.wait_replies(
        lambda rs: (
            len(client.replies_for(run_id=pending["run_id"], status="pending_approval")) == 2
        ),
        what="a second pending_approval",
    )


async def test_resume_of_unknown_approval_is_404_and_dead_letter(
    client: Client, worker: WorkerProcess
) -> None:
    partition, offset = await client.send({"approval_id": "appr_missing"})
    sent = client.sent(partition, offset)
    reply = await client.reply_for(status="error", run_id=sent.run_id)
    assert (reply["error"]["kind"], reply["error"]["status"]) == ("ApprovalNotFound", 404)
    letters = await dead_letters(worker.settings)
    assert [orjson.loads(m.value) for m in letters] == [{"approval_id": "appr_missing"}]
    assert dict(letters[0].headers)["error-kind"] == b"ApprovalNotFound"


@pytest.mark.parametrize("signed_with", [None, "wrong", "k0"])
async def test_decisions_must_be_signed_when_keys_are_configured(
    worker_factory, client: Client, signed_with: str | None
) -> None:
    spec = "k0:old-secret-0123456789abcdef0123456789,k1:new-secret-0123456789abcdef0123456789"
    worker = worker_factory(STREAM_ADAPTER_DECISION_KEYS=spec)
    await worker.ready()
    pending = await _park(client)
    approval_id = pending["approval_id"]
    body = orjson.dumps({"approval_id": approval_id, "approved": True, "reviewer": "ann"})
    if signed_with is None:
        headers = None
    elif signed_with == "wrong":
        headers = list(DecisionKeys.parse("k1:guess").sign(body).items())
    else:
        old_key = DecisionKeys.parse(spec.split(",")[0])  # a rotated-out key still verifies
        headers = await bound_signature(client.settings, approval_id, body, old_key)
    await client.send(
        body, key=approval_id.encode(), topic=client.settings.decisions_topic, headers=headers
    )
    if signed_with == "k0":
        await client.reply_for(status="ok", run_id=pending["run_id"])
        assert len(_ledger(worker)) == 1
        return
    settings = worker.settings
    letters = await dead_letters(settings)
    assert [m.value for m in letters] == [body]
    assert dict(letters[0].headers)["source-topic"] == settings.decisions_topic.encode()
    assert [r.state for r in await _records(worker, approval_id)] == ["pending"]
    assert _ledger(worker) == []
    assert "security: decision rejected" in worker.log_text()
