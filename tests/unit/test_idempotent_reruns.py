"""An approved call whose run died: idempotent tools run again, others stay at most once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from stream_adapter import (
    ApprovalInProgress,
    ApprovalState,
    Executor,
    MemoryApprovalStore,
    ToolRegistry,
    handle_envelope,
    record_decision,
)
from stream_adapter.core.approvals import MAX_RUNS, ApprovalStore
from stream_adapter.hosts.handler import rerun_after


def executor(store: ApprovalStore, runs: list[str], *, idempotent: bool) -> Executor:
    reg = ToolRegistry()

    @reg.tool(confirm=True, idempotent=idempotent)
    async def pay(n: int) -> dict[str, Any]:
        from stream_adapter import current_call

        runs.append(current_call().call_id)
        return {"paid": n}

    return Executor(reg, store)


async def died_while_running(ex: Executor, store: ApprovalStore, *, age_s: float = 3600) -> str:
    """Park, approve and claim a call, as a host that died `age_s` ago while running it."""
    reply = await handle_envelope(ex, b'{"tool":"pay","arguments":{"n":3}}', message_id="m-1")
    approval_id = str(reply["approval_id"])
    status, _ = await record_decision(ex, approval_id, reviewer="ann", approved=True)
    assert status == 200
    record, won = await store.claim(approval_id)
    assert won and record.state is ApprovalState.RUNNING
    if age_s:  # the same record in a fresh store, its run started age_s ago
        started = datetime.now(UTC) - timedelta(seconds=age_s)
        ex.store = MemoryApprovalStore()
        await ex.store.park(record.model_copy(update={"started_at": started.isoformat()}))
    return approval_id


async def test_an_idempotent_call_whose_run_died_runs_again_with_the_same_call_id() -> None:
    store, runs = MemoryApprovalStore(), []
    ex = executor(store, runs, idempotent=True)
    approval_id = await died_while_running(ex, store)
    reply = await handle_envelope(ex, {"approval_id": approval_id})
    assert reply["status"] == "ok" and reply["result"] == {"paid": 3}
    assert ex.store is not None
    record = await ex.store.get(approval_id)
    assert record is not None and record.state is ApprovalState.DONE and record.runs == 2
    assert runs == [record.call_id]
    again = await handle_envelope(ex, {"approval_id": approval_id})
    assert again["status"] == "already_done" and again["outcome"]["result"] == {"paid": 3}
    assert len(runs) == 1


async def test_a_non_idempotent_call_whose_run_died_never_runs_again() -> None:
    store, runs = MemoryApprovalStore(), []
    ex = executor(store, runs, idempotent=False)
    approval_id = await died_while_running(ex, store)
    reply = await handle_envelope(ex, {"approval_id": approval_id})
    assert reply["status"] == "already_done" and reply["outcome"] == "unknown"
    assert runs == []


async def test_a_host_never_reruns_a_run_that_may_still_be_going() -> None:
    store, runs = MemoryApprovalStore(), []
    ex = executor(store, runs, idempotent=True)
    approval_id = await died_while_running(ex, store, age_s=0)
    with pytest.raises(ApprovalInProgress) as caught:  # its run may be live in another process
        await handle_envelope(ex, {"approval_id": approval_id})
    assert caught.value.retryable  # the queue delivers it again, after the run's timeout
    record = await store.get(approval_id)
    assert record is not None and record.runs == 1 and runs == []
    assert rerun_after(ex.resolve("pay")) > 60


async def test_an_idempotent_call_stops_running_again_after_max_runs() -> None:
    store, runs = MemoryApprovalStore(), []
    ex = executor(store, runs, idempotent=True)
    approval_id = await died_while_running(ex, store)
    assert ex.store is not None
    for _ in range(MAX_RUNS - 1):
        assert (await ex.store.reclaim(approval_id))[1]  # each of these runs died too
    reply = await handle_envelope(ex, {"approval_id": approval_id})
    assert reply["status"] == "already_done" and reply["outcome"] == "unknown"
    assert runs == []


@pytest.mark.parametrize("idempotent", [True, False])
async def test_the_tool_option_is_recorded(idempotent: bool) -> None:
    ex = executor(MemoryApprovalStore(), [], idempotent=idempotent)
    assert ex.resolve("pay").idempotent is idempotent
