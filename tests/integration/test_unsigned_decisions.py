"""Unsigned decisions are refused unless ALLOW_UNSIGNED_DECISIONS says otherwise, and a worker
says at start which of the two it does (SPEC §7, §12)."""

from __future__ import annotations

import orjson

from stream_adapter.core.signing import DecisionKeys
from tests.harness import Client, WorkerProcess, dead_letters, unique, wait_for


async def park(client: Client) -> dict:
    run_id = unique("run")
    await client.call(
        "send_invoice", {"customer": "acme", "amount_cents": 1}, run_id=run_id, call_id="c"
    )
    return await client.reply_for(status="pending_approval", run_id=run_id)


async def logged(worker: WorkerProcess, line: str) -> None:
    await wait_for(lambda: line in worker.log_text(), timeout_s=30, what=repr(line))


def ledger(worker: WorkerProcess) -> list[str]:
    return worker.ledger.read_text().splitlines() if worker.ledger.exists() else []


async def test_a_worker_without_keys_refuses_every_decision(
    worker_factory: type[WorkerProcess], client: Client
) -> None:
    worker = worker_factory(STREAM_ADAPTER_DECISION_KEYS="")  # type: ignore[call-arg]
    await worker.ready()
    await logged(worker, "security: no decision keys")
    pending = await park(client)
    await client.decide(pending["approval_id"], True, reviewer="mallory", signed=False)
    letters = await dead_letters(client.settings)
    assert [m.key for m in letters] == [pending["approval_id"].encode()]
    assert dict(letters[0].headers)["error-status"] == b"401"
    await logged(worker, "security: decision rejected")
    assert ledger(worker) == []
    assert not client.replies_for(status="ok", run_id=pending["run_id"])


async def test_allowing_unsigned_decisions_is_explicit_and_announced(
    worker_factory: type[WorkerProcess], client: Client
) -> None:
    worker = worker_factory(STREAM_ADAPTER_ALLOW_UNSIGNED_DECISIONS="true")  # type: ignore[call-arg]
    await worker.ready()
    await logged(worker, "security: unsigned decisions are accepted")
    unsigned, forged = await park(client), await park(client)
    await client.decide(unsigned["approval_id"], True, signed=False)
    await client.reply_for(status="ok", run_id=unsigned["run_id"])
    # A decision that carries a signature is still checked: a forged one changes nothing.
    body = orjson.dumps({"approval_id": forged["approval_id"], "approved": True, "reviewer": "m"})
    wrong = DecisionKeys.parse("test:not-the-key").sign(body).items()
    await client.send(
        body, key=forged["approval_id"].encode(), topic=client.settings.decisions_topic,
        headers=wrong,
    )  # fmt: skip
    letters = await dead_letters(client.settings)
    assert [m.key for m in letters] == [forged["approval_id"].encode()]
    assert len(ledger(worker)) == 1
