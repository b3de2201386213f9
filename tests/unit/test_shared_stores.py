"""The shared approval stores (Redis; SQL on PostgreSQL and SQLite) across processes.

The store protocol suite of test_stores runs against each of them too. The services come from
tests/services.py: a redis-server and a PostgreSQL cluster per session, a namespace or a
database per test.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from examples.backend import store_from_url
from stream_adapter import (
    ApprovalState,
    BrokerError,
    RunSync,
    handle_envelope,
    record_decision,
    resolve_outcome,
    tool_handler,
)
from stream_adapter.core.approvals import ApprovalRecord, ApprovalStore, new_record
from stream_adapter.core.envelope import parse_envelope
from tests.unit.aws_events import LambdaContext, sqs_event
from tests.unit.test_stores import (  # the protocol suite, run again with this module's store
    test_100_concurrent_resumes_run_once,
    test_after_not_run_neither_a_stale_nor_a_racing_host_starts_it_twice,
    test_claim_and_finish,
    test_decide,
    test_list,
    test_park_is_insert_if_absent,
    test_protocol_is_met,
    test_racing_reruns_of_an_idempotent_call_start_one_run,
    test_reclaim_reruns_a_running_record_up_to_max_runs,
    test_resolve_not_run_approves_one_fresh_run,
    test_resolve_ran_settles_an_unknown_outcome,
)
from topologies.demo import build_executor

__all__ = [
    "test_100_concurrent_resumes_run_once",
    "test_after_not_run_neither_a_stale_nor_a_racing_host_starts_it_twice",
    "test_claim_and_finish",
    "test_decide",
    "test_list",
    "test_park_is_insert_if_absent",
    "test_protocol_is_met",
    "test_racing_reruns_of_an_idempotent_call_start_one_run",
    "test_reclaim_reruns_a_running_record_up_to_max_runs",
    "test_resolve_not_run_approves_one_fresh_run",
    "test_resolve_ran_settles_an_unknown_outcome",
]

ROOT = Path(__file__).parent.parent.parent
STEPS = Path(__file__).parent / "shared_steps.py"
KINDS = ["redis", "sql-postgres", "sql-sqlite", "dynamodb"]
INVOICE = {"tool": "send_invoice", "arguments": {"customer": "acme", "amount_cents": 1250}}
WIRE = {"tool": "wire_funds", "arguments": {"account": "acme", "amount_cents": 1250}}


def store_url(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL for a fresh, empty store of kind (the services start on first use)."""
    if kind == "redis":
        server = request.getfixturevalue("redis_server")
        return f"{server}#{request.getfixturevalue('redis_namespace')}"
    if kind == "sql-postgres":
        return str(request.getfixturevalue("postgres_url"))
    if kind == "dynamodb":  # moto's server: an emulator of DynamoDB's API, not DynamoDB
        endpoint = request.getfixturevalue("dynamodb_server")
        return f"dynamodb://t{uuid.uuid4().hex[:16]}?region=eu-west-1&endpoint_url={endpoint}"
    return f"sqlite+aiosqlite:///{tmp_path / 'approvals.db'}"


@pytest.fixture(params=KINDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return store_url(request.param, request, tmp_path)


@pytest.fixture
async def store(url: str) -> AsyncIterator[ApprovalStore]:
    shared = store_from_url(url)
    yield shared
    await shared.aclose()  # type: ignore[attr-defined]


def child_env(url: str, ledger: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "STREAM_ADAPTER_APPROVAL_STORE": url,
        "STREAM_ADAPTER_DEMO_LEDGER": str(ledger),
    }


def step(env: dict[str, str], *args: str) -> Any:
    """Run one step in a new process (a new container) and return what it printed."""
    done = subprocess.run(
        [sys.executable, str(STEPS), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def invoke(env: dict[str, str], *calls: tuple[Any, str]) -> list[Any]:
    """Invoke the example handler in a new process (a new container), once per call."""
    return list(step(env, "invoke", json.dumps(calls)))


@pytest.mark.parametrize("kind", ["redis", "sql-postgres", "dynamodb"])
def test_approvals_across_invocations_in_separate_processes(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    env = child_env(store_url(kind, request, tmp_path), tmp_path / "ledger.jsonl")
    # Container 1: the call parks and answers pending_approval.
    [call] = invoke(env, (INVOICE, "req-call-1"))
    assert call["status"] == "pending_approval"
    # The review app (another process): the decision goes into the shared store.
    review = step(env, "review", call["approval_id"])
    assert review == {"status": 200, "sent": [{"approval_id": call["approval_id"]}]}
    resume = review["sent"][0]
    # Container 2: the resume runs the call once.
    [done] = invoke(env, (resume, "req-resume-1"))
    assert done["status"] == "ok"
    assert done["result"] == {"invoiced": "acme", "amount_cents": 1250}
    # Container 3: the resume redelivered (directly, then by SQS) and the call redelivered.
    again, by_sqs, call_again = invoke(
        env, (resume, "req-resume-1"), (sqs_event([resume]), ""), (INVOICE, "req-call-1")
    )
    assert again["status"] == "already_done" and again["outcome"] == done
    assert by_sqs == {"batchItemFailures": []}  # acked, not dead-lettered
    assert call_again["status"] == "already_done"
    ledger = (tmp_path / "ledger.jsonl").read_text().splitlines()
    assert [json.loads(line)["call_id"] for line in ledger] == [call["call_id"]]


@pytest.mark.parametrize("call", [WIRE, INVOICE], ids=["wire_funds", "send_invoice"])
def test_fifty_concurrent_resumes_from_four_processes_run_once(
    url: str, tmp_path: Path, call: dict[str, Any]
) -> None:
    """Non-idempotent or idempotent, one run: a resume meeting the live run of an idempotent
    tool in another process fails retryably (ApprovalInProgress) instead of answering an
    unknown outcome; one in the same process waits for it."""
    ledger = tmp_path / "ledger.jsonl"
    approval_id = asyncio.run(_approved(url, call))
    env = child_env(url, ledger)
    children = [
        subprocess.Popen(
            [sys.executable, str(STEPS), "burst", approval_id, str(n)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for n in (13, 13, 12, 12)
    ]
    for child in children:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready", child.stderr
    outputs = [child.communicate("go\n", timeout=120) for child in children]
    assert all(child.returncode == 0 for child in children), [err for _, err in outputs]
    statuses = [s for out, _ in outputs for s in json.loads(out.strip().splitlines()[-1])]
    assert len(statuses) == 50
    busy = "ApprovalInProgress" if call is INVOICE else "never"
    assert statuses.count("ok") == 1
    assert statuses.count("already_done") + statuses.count(busy) == 49
    assert len(ledger.read_text().splitlines()) == 1


async def _approved(url: str, call: dict[str, Any] = INVOICE) -> str:
    store = store_from_url(url)
    try:
        executor = build_executor(store)
        reply = await handle_envelope(executor, call, message_id="m-1", source="sqs")
        assert reply["status"] == "pending_approval"
        status, _ = await record_decision(
            executor, reply["approval_id"], reviewer="ann", approved=True
        )
        assert status == 200
        return str(reply["approval_id"])
    finally:
        await store.aclose()  # type: ignore[attr-defined]


async def test_an_unreachable_store_is_a_retryable_broker_error(tmp_path: Path) -> None:
    from tests.services import _free_port

    port = _free_port()
    for url in (
        f"redis://127.0.0.1:{port}/0",
        f"postgresql+asyncpg://u@127.0.0.1:{port}/db",
        f"dynamodb://t?region=eu-west-1&endpoint_url=http://127.0.0.1:{port}",
    ):
        store = store_from_url(url)
        with pytest.raises(BrokerError) as caught:
            await store.get("appr_x")
        assert caught.value.retryable and caught.value.status == 503
        await store.aclose()  # type: ignore[attr-defined]


def test_import_stream_adapter_needs_neither_redis_nor_sqlalchemy() -> None:
    code = (
        "import sys, stream_adapter, stream_adapter.hosts.stores; "
        "assert 'redis' not in sys.modules and 'sqlalchemy' not in sys.modules, 'eager'; "
        "assert 'aiobotocore' not in sys.modules, 'eager'; "
        "from stream_adapter import SQLApprovalStore; assert 'sqlalchemy' in sys.modules"
    )
    subprocess.run(
        [sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )


def test_a_missing_extra_names_itself() -> None:
    code = (
        "import sys; sys.modules['redis'] = None\n"
        "from stream_adapter import RedisApprovalStore\n"
        "try:\n    RedisApprovalStore('redis://127.0.0.1:6379/0')\n"
        "except ImportError as exc:\n    assert \"'redis' extra\" in str(exc), exc\n"
        "else:\n    raise SystemExit('built')"
    )
    subprocess.run(
        [sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )


def test_a_fresh_loop_per_invocation_closes_its_clients(url: str) -> None:
    store = store_from_url(url)
    handler = tool_handler(build_executor(store), runner=RunSync())
    context = LambdaContext(aws_request_id="req-fresh-1")
    first = handler(INVOICE, context)
    assert len(store._conns) == 0  # type: ignore[attr-defined]  # closed with its loop
    assert handler(INVOICE, context) == first  # the next loop opens a new client
    assert first["status"] == "pending_approval"
    assert len(store._conns) == 0  # type: ignore[attr-defined]


def _left_running(url: str, call: dict[str, Any], age_s: float = 3600.0) -> str:
    """The record a host leaves when it dies while running an approved call, age_s ago."""
    envelope = parse_envelope({**call, "run_id": "run-dead", "call_id": "call-dead"})
    started = datetime.now(UTC) - timedelta(seconds=age_s)
    record = new_record(envelope, call["tool"], origin=build_executor().origin).model_copy(
        update={
            "state": ApprovalState.RUNNING,
            "reviewer": "ann",
            "decided_at": started.isoformat(),
            "runs": 1,
            "started_at": started.isoformat(),
            "started_by": "dead-host:1",
        }
    )

    async def park() -> None:
        store = store_from_url(url)
        try:
            await store.park(record)
        finally:
            await store.aclose()  # type: ignore[attr-defined]

    asyncio.run(park())
    return record.approval_id


@pytest.mark.parametrize("call", [WIRE, INVOICE], ids=["wire_funds", "send_invoice"])
def test_a_run_that_died_with_its_host_follows_the_tool_s_rule(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: dict[str, Any]
) -> None:
    """Through tool_handler (and so handle_envelope) on a shared store: an idempotent tool's
    dead run runs again with the same call_id; another's becomes unknown, and runs once more
    only when a person says it did not run."""
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv("STREAM_ADAPTER_DEMO_LEDGER", str(ledger))
    approval_id = _left_running(url, call)
    store = store_from_url(url)
    executor = build_executor(store)
    handler = tool_handler(executor, runner=RunSync())
    resume = {"approval_id": approval_id}

    def lines() -> list[str]:
        text = ledger.read_text() if ledger.exists() else ""
        return [json.loads(line)["call_id"] for line in text.splitlines()]

    def sync(work: Callable[[], Awaitable[Any]]) -> Any:
        """Run work on a loop of its own, as an invocation does, closing its client after."""

        async def then_close() -> Any:
            try:
                return await work()
            finally:
                await store.aclose()  # type: ignore[attr-defined]

        return RunSync().run(then_close)

    def stored() -> ApprovalRecord:
        found: ApprovalRecord | None = sync(lambda: store.get(approval_id))
        assert found is not None
        return found

    first = handler(resume, LambdaContext(aws_request_id="req-1"))
    if call is INVOICE:
        assert first["status"] == "ok" and first["call_id"] == "call-dead"
        assert first["result"] == {"invoiced": "acme", "amount_cents": 1250}
        assert lines() == ["call-dead"]
        record = stored()
        assert record.state is ApprovalState.DONE and record.runs == 2
    else:
        assert first["status"] == "already_done" and first["outcome"] == "unknown"
        assert lines() == []
        record = stored()
        assert record.state is ApprovalState.UNKNOWN and record.unknown_at
        unknown = sync(lambda: store.list(ApprovalState.UNKNOWN))
        assert [r.approval_id for r in unknown] == [approval_id]
        status, _ = sync(lambda: resolve_outcome(executor, approval_id, reviewer="bob", ran=False))
        assert status == 200
        fresh = handler(resume, LambdaContext(aws_request_id="req-2"))
        assert fresh["status"] == "ok" and lines() == ["call-dead"]
        record = stored()
        assert record.state is ApprovalState.DONE and record.runs == 2
    again = handler(resume, LambdaContext(aws_request_id="req-3"))
    assert again["status"] == "already_done" and again["outcome"]["status"] == "ok"
    assert lines() == ["call-dead"]
    assert len(store._conns) == 0  # type: ignore[attr-defined]  # closed with each loop
