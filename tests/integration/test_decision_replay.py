"""A signed decision decides the record it was signed for, nothing else: one signed over its
value alone, or replayed onto a call parked later under the same ids, is refused (§7)."""

from __future__ import annotations

import orjson

from stream_adapter.core.approvals import ApprovalRecord
from stream_adapter.core.signing import DecisionKeys
from stream_adapter.settings import Settings
from tests.harness import (
    Client,
    WorkerProcess,
    bound_signature,
    dead_letters,
    read_all,
    unique,
    wait_for,
)


def _invoice(ids: dict[str, str]) -> dict[str, object]:
    return {"tool": "send_invoice", "arguments": {"customer": "a", "amount_cents": 1}, **ids}


async def _states(settings: Settings, approval_id: str) -> list[str]:
    messages = await read_all(settings, settings.approvals_topic)
    return [
        ApprovalRecord.from_bytes(m.value).state if m.value is not None else "removed"
        for m in messages
        if m.key == approval_id.encode()
    ]


async def test_a_decision_signed_over_its_value_alone_is_refused(
    worker: WorkerProcess, client: Client
) -> None:
    ids = {"run_id": unique("run"), "call_id": unique("call")}
    await client.send(_invoice(ids), key=ids["run_id"].encode())
    pending = await client.reply_for(status="pending_approval", **ids)
    approval_id = pending["approval_id"]
    value = orjson.dumps({"approval_id": approval_id, "approved": True, "reviewer": "ann"})
    unbound = DecisionKeys.from_settings(worker.settings).sign(value)
    await client.send(
        value,
        key=approval_id.encode(),
        topic=worker.settings.decisions_topic,
        headers=list(unbound.items()),
    )
    [letter] = await dead_letters(worker.settings)
    assert dict(letter.headers)["error-status"] == b"401"
    assert await _states(worker.settings, approval_id) == ["pending"]


async def test_an_old_decision_replayed_onto_a_new_call_with_the_same_ids_is_refused(
    worker_factory: type[WorkerProcess], client: Client
) -> None:
    worker = worker_factory(  # type: ignore[call-arg]
        STREAM_ADAPTER_SETTLED_RETENTION_S="2", STREAM_ADAPTER_APPROVALS_SWEEP_INTERVAL_S="0.5"
    )
    await worker.ready()
    settings = worker.settings
    ids = {"run_id": unique("run"), "call_id": unique("call")}
    await client.send(_invoice(ids), key=ids["run_id"].encode())
    pending = await client.reply_for(status="pending_approval", **ids)
    approval_id = pending["approval_id"]
    value = orjson.dumps({"approval_id": approval_id, "approved": False, "reviewer": "ann"})
    headers = await bound_signature(settings, approval_id, value)
    await client.send(
        value, key=approval_id.encode(), topic=settings.decisions_topic, headers=headers
    )
    await client.reply_for(status="error", **ids)  # denied

    async def removed() -> bool:
        return (await _states(settings, approval_id))[-1:] == ["removed"]

    await wait_for(removed, timeout_s=60, what="the settled record removed after its retention")
    # The same ids again: a new call, parked anew; the old signed decision replayed onto it.
    await client.send(_invoice(ids), key=ids["run_id"].encode())
    await client.wait_replies(
        lambda rs: len([r for r in rs if r["status"] == "pending_approval"]) == 2
    )
    await client.send(
        value, key=approval_id.encode(), topic=settings.decisions_topic, headers=headers
    )
    [letter] = await dead_letters(settings)
    assert letter.value == value
    assert (await _states(settings, approval_id))[-1] == "pending"
