"""The Temporal recipe: the activity, the workflow's approval logic, and both on a dev server.

The activity and the workflow's logic run here without a server. The whole workflow runs on
Temporal's CLI dev server when its binary is present (``bash scripts/temporal.sh`` builds it
from its Go module); temporalio's own test servers are downloaded binaries, unreachable here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from examples.backend import backend
from examples.temporal_activities import run_envelope
from examples.temporal_workflow import ToolCallWorkflow, approval_flow
from stream_adapter import record_decision
from stream_adapter.core.ids import derive_ids

ROOT = Path(__file__).parent.parent.parent
CLI_ENV = "STREAM_ADAPTER_TEMPORAL_CLI"


@pytest.fixture(autouse=True)
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setenv("STREAM_ADAPTER_DEMO_LEDGER", str(path))
    return path


def invoice() -> dict[str, Any]:
    return {
        "tool": "send_invoice",
        "arguments": {"customer": f"c-{uuid.uuid4().hex[:8]}", "amount_cents": 990},
    }


def activity_env(workflow_id: str, run_id: str = "run-1", activity_id: str = "1") -> Any:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        ActivityEnvironment.default_info(),
        workflow_id=workflow_id,
        workflow_run_id=run_id,
        activity_id=activity_id,
    )
    return env


# -- without a server -------------------------------------------------------------------------


async def test_the_activity_runs_envelopes_as_the_same_call_on_every_attempt() -> None:
    workflow_id = f"wf-{uuid.uuid4().hex}"
    env = activity_env(workflow_id)
    reply = await env.run(run_envelope, {"tool": "add", "arguments": {"a": 2, "b": 2}})
    assert reply["result"] == 4
    assert (reply["run_id"], reply["call_id"]) == derive_ids(f"{workflow_id}/run-1/1", "workflow")
    call = invoice()
    confirm = activity_env(workflow_id, activity_id="2")
    parked = await confirm.run(run_envelope, call)
    retried = await confirm.run(run_envelope, call)  # the activity's next attempt
    assert parked["status"] == retried["status"] == "pending_approval"
    assert retried["approval_id"] == parked["approval_id"]  # asked once
    other_run = await activity_env(workflow_id, run_id="run-2", activity_id="2").run(
        run_envelope, call
    )
    assert other_run["approval_id"] != parked["approval_id"]  # a reset run asks again


async def test_activity_errors_are_application_errors_retryable_as_the_adapter_says() -> None:
    env = activity_env(f"wf-{uuid.uuid4().hex}")
    with pytest.raises(ApplicationError) as hidden:
        await env.run(run_envelope, {"tool": "admin_reset", "arguments": {}})
    assert hidden.value.type == "ToolNotFound" and hidden.value.non_retryable
    with pytest.raises(ApplicationError) as flaky:
        await env.run(
            run_envelope, {"tool": "flaky", "arguments": {"key": uuid.uuid4().hex, "fail_times": 1}}
        )
    assert flaky.value.type == "ToolFailed" and not flaky.value.non_retryable
    assert flaky.value.details[0]["status"] == 500


async def test_the_workflow_logic_waits_for_a_signal_while_the_approval_is_pending() -> None:
    replies = [
        {"status": "pending_approval", "approval_id": "appr_1"},
        {"status": "pending_approval", "approval_id": "appr_1"},  # signalled too early
        {"status": "ok", "result": 1},
    ]
    ran: list[dict[str, Any]] = []
    waits: list[int] = []

    async def run(payload: dict[str, Any]) -> dict[str, Any]:
        ran.append(payload)
        return replies[len(ran) - 1]

    async def wait() -> None:
        waits.append(len(ran))

    call = {"tool": "send_invoice", "arguments": {}}
    assert await approval_flow(call, run, wait) == {"status": "ok", "result": 1}
    assert ran == [call, {"approval_id": "appr_1"}, {"approval_id": "appr_1"}]
    assert waits == [1, 2]  # a wait before every resume, never a resume without a signal


async def test_a_settled_first_reply_needs_no_signal() -> None:
    async def run(payload: dict[str, Any]) -> dict[str, Any]:
        return {"status": "ok", "result": payload}

    async def never() -> None:
        raise AssertionError("no wait expected")

    assert (await approval_flow({"tool": "echo"}, run, never))["status"] == "ok"


# -- on Temporal's dev server -----------------------------------------------------------------


def temporal_cli() -> str | None:
    """The Temporal CLI binary: $STREAM_ADAPTER_TEMPORAL_CLI, .temporal/bin, or PATH."""
    for candidate in (os.environ.get(CLI_ENV), str(ROOT / ".temporal" / "bin" / "temporal")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("temporal")


@pytest.fixture
def cli() -> str:
    found = temporal_cli()
    if found is None:
        pytest.skip(
            "no Temporal CLI binary (its dev server): build it with `bash scripts/temporal.sh`"
            f" or point {CLI_ENV} at one"
        )
    assert found is not None
    return found


async def until(check: Callable[[], Awaitable[Any]], timeout_s: float = 60.0) -> Any:
    """Poll a remote query (a workflow's) until it answers something, within timeout_s."""
    async with asyncio.timeout(timeout_s):
        while (value := await check()) is None:  # noqa: ASYNC110 (the state is remote)
            await asyncio.sleep(0.05)
    return value


async def test_the_workflow_on_the_dev_server(cli: str, ledger: Path) -> None:
    from temporalio.client import WorkflowFailureError
    from temporalio.testing import WorkflowEnvironment
    from temporalio.worker import Worker

    queue = f"tool-calls-{uuid.uuid4().hex[:8]}"
    async with (
        await WorkflowEnvironment.start_local(dev_server_existing_path=cli) as env,
        Worker(
            env.client, task_queue=queue, workflows=[ToolCallWorkflow], activities=[run_envelope]
        ),
    ):
        approved = await env.client.start_workflow(
            ToolCallWorkflow.run, invoice(), id=f"wf-{uuid.uuid4().hex}", task_queue=queue
        )
        denied = await env.client.start_workflow(
            ToolCallWorkflow.run, invoice(), id=f"wf-{uuid.uuid4().hex}", task_queue=queue
        )
        approval_id = await until(lambda: approved.query(ToolCallWorkflow.approval_id))
        denied_id = await until(lambda: denied.query(ToolCallWorkflow.approval_id))
        await approved.signal(ToolCallWorkflow.decided)  # before any decision: it waits again

        async def early_resume_done() -> bool | None:
            done = [
                e
                async for e in approved.fetch_history_events()
                if e.HasField("activity_task_completed_event_attributes")
            ]
            return True if len(done) == 2 else None  # the call, then the early resume

        await until(early_resume_done)
        status, _ = await record_decision(backend(), approval_id, reviewer="ann", approved=True)
        assert status == 200
        status, _ = await record_decision(backend(), denied_id, reviewer="ann", approved=False)
        assert status == 200
        await approved.signal(ToolCallWorkflow.decided)
        await denied.signal(ToolCallWorkflow.decided)
        reply = await approved.result()
        assert reply["status"] == "ok" and reply["approval_id"] == approval_id
        with pytest.raises(WorkflowFailureError) as failed:
            await denied.result()
        cause = failed.value.cause.cause  # ActivityError → ApplicationError
        assert isinstance(cause, ApplicationError) and cause.type == "ApprovalDenied"
        history = [
            e.activity_task_scheduled_event_attributes.input
            async for e in approved.fetch_history_events()
            if e.HasField("activity_task_scheduled_event_attributes")
        ]
        assert len(history) == 3  # the call, the early resume (still pending), the resume
    text = await asyncio.to_thread(ledger.read_text)
    lines = [json.loads(line) for line in text.splitlines()]
    assert [line["call_id"] for line in lines] == [reply["call_id"]]
