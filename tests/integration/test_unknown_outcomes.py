"""Unknown outcomes reach a person: a non-idempotent approved call whose worker died while it
ran becomes `unknown` on the approvals table, and a signed resolution on `approval-decisions`
settles it ("it ran") or runs it once more ("it did not run"); the agent gets the final reply."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from stream_adapter.core.approvals import ApprovalRecord, Resolution, utc_now
from stream_adapter.core.signing import DecisionKeys
from stream_adapter.review.decide import decision_message
from stream_adapter.settings import Settings
from stream_adapter.stream import faults
from tests.harness import (
    Client,
    WorkerProcess,
    bound_signature,
    dead_letters,
    latest_record,
    read_all,
    unique,
    wait_for,
)
from tests.integration.review_support import SHORT_RUNS, Api, ReviewProcess, add_reviewer, cli

KEYS = "k1:unknown-outcome-secret-0123456789abcdef"


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
        record = await latest_record(client.settings, approval_id)
        value, headers = decision_message(
            Resolution(approval_id=approval_id, decided_at=utc_now(), **body), keys, record
        )
    else:
        value = json.dumps({"approval_id": approval_id, **body}).encode()
        headers = await bound_signature(client.settings, approval_id, value, keys)
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
        name=name,
        STREAM_ADAPTER_DECISION_KEYS=KEYS,
        STREAM_ADAPTER_CRASH_AT=faults.RUNNING,
        **SHORT_RUNS,
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


@pytest.fixture
def review_settings(settings: Settings, tmp_path: Path) -> Settings:
    return settings.with_changes(reviewers_file=tmp_path / "reviewers.json")


@pytest.fixture
def review(review_settings: Settings, tmp_path: Path) -> Iterator[ReviewProcess]:
    env = {"STREAM_ADAPTER_DECISION_KEYS": KEYS}
    process = ReviewProcess(review_settings, tmp_path / "review", env).start()
    yield process
    process.kill()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def test_operators_find_and_resolve_unknown_outcomes_with_the_cli_and_the_api(
    worker_factory: Callable[..., WorkerProcess],
    client: Client,
    review_settings: Settings,
    review: ReviewProcess,
    http: aiohttp.ClientSession,
) -> None:
    ran_id, ran_run, _ = await _approve_and_die(worker_factory, client, "first", "a")
    not_run_id, not_run_run, not_run_call = await _approve_and_die(
        worker_factory, client, "second", "b"
    )
    third = worker_factory(name="third", STREAM_ADAPTER_DECISION_KEYS=KEYS)
    await third.ready()
    await client.reply_for(run_id=not_run_run, status="already_done", timeout_s=60)
    signed = {"STREAM_ADAPTER_DECISION_KEYS": KEYS}

    async def listed_unknown() -> bool:
        done = cli(review_settings, "approvals", "list", "--state", "unknown", "--json")
        assert done.returncode == 0, done.stderr
        ids = {json.loads(line)["approval_id"] for line in done.stdout.splitlines()}
        return ids == {ran_id, not_run_id}

    await wait_for(listed_unknown, timeout_s=30, what="both approvals listed unknown")

    token = add_reviewer(review_settings, "ann")
    await review.ready()
    api = Api(http, review.url, token)
    await api.wait_listed(ran_id)
    status, body = await api.request("GET", "/api/approvals?state=unknown")
    assert status == 200
    assert {r["approval_id"] for r in body["approvals"]} == {ran_id, not_run_id}
    path = f"/api/approvals/{ran_id}/resolution"
    status, body = await api.request("POST", path, json={"ran": True, "reviewer": "mallory"})
    assert status == 400 and body["kind"] == "ToolUsageError"
    status, body = await api.request("POST", path, json={"ran": True, "result": {"ref": "x1"}})
    assert status == 200, body
    assert body["status"] == "resolved" and body["approval"]["resolved_by"] == "ann"
    ok = await client.reply_for(run_id=ran_run, status="ok", timeout_s=60)
    assert ok["result"] == {"ref": "x1"} and ok["resolved_by"] == "ann"
    status, body = await api.request("POST", path, json={"ran": False})
    assert status == 409 and body["kind"] == "ApprovalConflict"

    resolved = cli(
        review_settings,
        "approvals",
        "resolve",
        not_run_id,
        "--not-run",
        "--reviewer",
        "bob",
        env=signed,
    )
    assert resolved.returncode == 0, resolved.stderr
    assert f"{not_run_id}: it did not run, by bob" in resolved.stdout
    fresh = await client.reply_for(run_id=not_run_run, status="ok", timeout_s=60)
    assert fresh["result"] == {"wired": "b", "amount_cents": 5}
    assert [line["call_id"] for line in _ledger(third)] == [not_run_call]
    again = cli(
        review_settings,
        "approvals",
        "resolve",
        not_run_id,
        "--not-run",
        "--reviewer",
        "bob",
        env=signed,
    )
    assert again.returncode == 5, again.stderr
    assert "ApprovalConflict" in again.stderr
    assert [line["call_id"] for line in _ledger(third)] == [not_run_call]
