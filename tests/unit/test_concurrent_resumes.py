"""Concurrent resumes of one approved call: one run, and every resume answers its outcome.

In one process a resume that meets the live run waits for it (`already_done` with the run's
reply as its outcome). A resume in another process cannot know that the run is live: it is
told `ApprovalInProgress` (retryable), never `ToolTimeout` for a tool that did not time out.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from examples.backend import store_from_url
from stream_adapter import (
    AdapterError,
    ApprovalInProgress,
    Executor,
    MemoryApprovalStore,
    SQLiteApprovalStore,
    ToolRegistry,
    handle_envelope,
    record_decision,
)
from stream_adapter.core.approvals import ApprovalStore
from tests.unit.live_run_worker import registry
from tests.unit.test_shared_stores import store_url

HERE = Path(__file__).parent
ROOT = HERE.parent.parent


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ApprovalStore]:
    if request.param == "memory":
        yield MemoryApprovalStore()
    else:
        sqlite = SQLiteApprovalStore(tmp_path / "approvals.db")
        yield sqlite
        sqlite.close()


async def approved(executor: Executor) -> str:
    reply = await handle_envelope(executor, {"tool": "pay", "arguments": {"n": 7}}, message_id="m")
    assert reply["status"] == "pending_approval"
    status, _ = await record_decision(executor, reply["approval_id"], reviewer="ann", approved=True)
    assert status == 200
    return str(reply["approval_id"])


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "at_most_once"])
async def test_100_concurrent_resumes_in_one_process_answer_the_runs_outcome(
    store: ApprovalStore, idempotent: bool
) -> None:
    runs: list[int] = []
    reg = ToolRegistry()

    @reg.tool(confirm=True, idempotent=idempotent, timeout_s=30)
    async def pay(n: int) -> int:
        runs.append(n)
        await asyncio.sleep(0.2)  # long enough for every other resume to meet the live run
        return n

    executor = Executor(reg, store)
    approval_id = await approved(executor)

    async def resume() -> Any:
        try:
            return await handle_envelope(executor, {"approval_id": approval_id})
        except AdapterError as exc:
            return exc.kind

    answers = await asyncio.gather(*(resume() for _ in range(100)))
    assert runs == [7]
    ok = [a for a in answers if isinstance(a, dict) and a["status"] == "ok"]
    assert len(ok) == 1, answers
    others = [a for a in answers if a is not ok[0]]
    assert all(isinstance(a, dict) and a["status"] == "already_done" for a in others), {
        a if isinstance(a, str) else a["status"] for a in others
    }
    assert all(a["outcome"] == ok[0] for a in others)


@pytest.mark.parametrize("kind", ["redis", "sql-sqlite"])
async def test_a_resume_meeting_a_run_in_another_process_is_told_in_progress(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = store_url(kind, request, tmp_path)
    store = store_from_url(url)
    executor = Executor(registry(), store)
    try:
        approval_id = await approved(executor)
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            str(HERE / "live_run_worker.py"),
            url,
            approval_id,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        try:
            assert child.stdout is not None
            line = await asyncio.wait_for(child.stdout.readline(), 60)
            assert line.strip() == b"running", line
            with pytest.raises(ApprovalInProgress) as caught:
                await handle_envelope(executor, {"approval_id": approval_id})
            assert caught.value.retryable and caught.value.approval_id == approval_id
            out, err = await asyncio.wait_for(child.communicate(b"go\n"), 60)
            assert child.returncode == 0, err
        finally:
            if child.returncode is None:
                child.kill()
                await child.wait()
        done = json.loads(out.strip().splitlines()[-1])
        assert done["status"] == "ok" and done["result"] == 7
        again = await handle_envelope(executor, {"approval_id": approval_id})
        assert again["status"] == "already_done" and again["outcome"] == done
    finally:
        await store.aclose()  # type: ignore[attr-defined]
