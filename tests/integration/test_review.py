"""The review service and the operator commands against a real broker and a real worker process."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import orjson
import pytest

from stream_adapter.core.signing import KEY_ID_HEADER, SIGNATURE_HEADER
from stream_adapter.settings import Settings
from tests.harness import Client, WorkerProcess, dead_letters, read_all, unique
from tests.integration.review_support import (
    Api,
    ReviewProcess,
    add_reviewer,
    cli,
    ledger_lines,
    park_invoice,
)

pytestmark = pytest.mark.integration
KEYS = "k1:review-test-secret-0123456789abcdef"


@pytest.fixture
def review_settings(settings: Settings, tmp_path: Path) -> Settings:
    return settings.with_changes(reviewers_file=tmp_path / "reviewers.json")


@pytest.fixture
def review_factory(review_settings: Settings, tmp_path: Path) -> Iterator[type[ReviewProcess]]:
    started: list[ReviewProcess] = []

    def make(**extra_env: str) -> ReviewProcess:
        process = ReviewProcess(review_settings, tmp_path / "review", dict(extra_env))
        started.append(process.start())
        return process

    yield make  # type: ignore[misc]
    for process in started:
        process.kill()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def test_api_decides_once_and_answers_409_after(
    worker: WorkerProcess,
    client: Client,
    review_settings: Settings,
    review_factory: type[ReviewProcess],
    http: aiohttp.ClientSession,
) -> None:
    token = add_reviewer(review_settings, "ann")
    review = review_factory()  # type: ignore[call-arg]
    await review.ready()
    api = Api(http, review.url, token)
    approval_id = await park_invoice(client, unique("run"))
    pending = await api.wait_listed(approval_id)
    assert pending["state"] == "pending" and pending["tool"] == "send_invoice"
    status, listed = await api.request("GET", "/api/approvals?state=pending")
    assert status == 200 and [r["approval_id"] for r in listed["approvals"]] == [approval_id]

    status, wrong = await Api(http, review.url, token + "x").request("GET", "/api/approvals")
    assert status == 401 and wrong["kind"] == "Unauthenticated"

    path = f"/api/approvals/{approval_id}/decision"
    status, body = await api.request("POST", path, json={"approved": True, "reason": "ok"})
    assert status == 200, body
    assert body["approval"]["reviewer"] == "ann"  # from the token
    assert body["approval"]["state"] in ("running", "done")
    reply = await client.reply_for(status="ok", tool="send_invoice", approval_id=approval_id)
    assert reply["result"] == {"invoiced": "acme", "amount_cents": 1250}

    status, again = await api.request("POST", path, json={"approved": False})
    assert status == 409 and again["kind"] == "ApprovalConflict"
    assert len(ledger_lines(worker.ledger)) == 1
    decisions = await read_all(review_settings.bootstrap_servers, review_settings.decisions_topic)
    assert len(decisions) == 1  # the 409 wrote nothing
    assert orjson.loads(decisions[0].value)["reviewer"] == "ann"


async def test_unsigned_or_badly_signed_decisions_change_nothing_and_land_in_the_dlq(
    worker_factory: type[WorkerProcess],
    client: Client,
    review_settings: Settings,
    review_factory: type[ReviewProcess],
    http: aiohttp.ClientSession,
) -> None:
    worker = worker_factory(STREAM_ADAPTER_DECISION_KEYS=KEYS)  # type: ignore[call-arg]
    token = add_reviewer(review_settings, "ann")
    review = review_factory(STREAM_ADAPTER_DECISION_KEYS=KEYS)  # type: ignore[call-arg]
    await worker.ready()
    await review.ready()
    api = Api(http, review.url, token)
    approval_id = await park_invoice(client, unique("run"))

    await client.decide(approval_id, True, reviewer="mallory", signed=False)
    body = orjson.dumps({"approval_id": approval_id, "approved": True, "reviewer": "mallory"})
    forged = [(KEY_ID_HEADER, b"k1"), (SIGNATURE_HEADER, b"0" * 64)]
    await client.send(
        body, key=approval_id.encode(), topic=review_settings.decisions_topic, headers=forged
    )
    dead = await dead_letters(review_settings, at_least=2, timeout_s=30)
    assert [m.key for m in dead] == [approval_id.encode()] * 2
    assert all(dict(m.headers)["error-kind"] == b"ToolUsageError" for m in dead)
    assert (await api.wait_listed(approval_id))["state"] == "pending"
    assert ledger_lines(worker.ledger) == []
    assert not client.replies_for(status="ok", approval_id=approval_id)

    # The service signs its decisions with the configured key: this one is applied.
    status, decided = await api.request(
        "POST", f"/api/approvals/{approval_id}/decision", json={"approved": True}
    )
    assert status == 200, decided
    await client.reply_for(status="ok", approval_id=approval_id)
    assert len(ledger_lines(worker.ledger)) == 1
    record = await api.record(approval_id)
    assert record["reviewer"] == "ann" and record["state"] == "done"


async def test_operator_commands_list_and_decide(
    worker: WorkerProcess, client: Client, review_settings: Settings
) -> None:
    approval_id = await park_invoice(client, unique("run"))
    listed = cli(review_settings, "approvals", "list", "--state", "pending", "--json")
    assert listed.returncode == 0, listed.stderr
    records = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [r["approval_id"] for r in records] == [approval_id]

    denied = cli(
        review_settings,
        "approvals",
        "decide",
        approval_id,
        "--deny",
        "--reviewer",
        "ops",
        "--reason",
        "not this month",
    )
    assert denied.returncode == 0, denied.stderr
    assert "denied by ops" in denied.stdout
    reply = await client.reply_for(status="error", approval_id=approval_id)
    assert reply["error"]["kind"] == "ApprovalDenied"

    again = cli(
        review_settings, "approvals", "decide", approval_id, "--approve", "--reviewer", "ops"
    )
    assert again.returncode == 5 and "ApprovalConflict" in again.stderr  # exit 5: not pending
    unknown = cli(
        review_settings, "approvals", "decide", "appr_nope", "--approve", "--reviewer", "x"
    )
    assert unknown.returncode == 5 and "ApprovalNotFound" in unknown.stderr
    done = cli(review_settings, "approvals", "list", "--state", "denied", "--json")
    assert [json.loads(line)["reviewer"] for line in done.stdout.splitlines()] == ["ops"]
    assert ledger_lines(worker.ledger) == []
