"""An approved call whose run left no outcome and may not run again becomes `unknown`, and a
person resolves it: "it ran" (ok reply with a result) or, once, "it did not run" (a fresh run)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from stream_adapter import ApprovalState, MemoryApprovalStore, handle_envelope, resolve_outcome
from stream_adapter.core.approvals import (
    MAX_RUNS,
    ApprovalRecord,
    Decision,
    Resolution,
    Step,
    apply_decision,
    apply_resolution,
    begin_run,
    give_up,
    instant,
    new_record,
    next_step,
    parse_decision,
    parse_reviewer_message,
    run_limit_s,
    settled_reply,
)
from stream_adapter.core.envelope import parse_envelope
from stream_adapter.core.errors import ApprovalConflict, ToolUsageError
from stream_adapter.hosts.backend import Backend
from stream_adapter.stream.metrics import unknown_outcomes
from tests.unit.test_idempotent_reruns import died_while_running, executor


def running_record() -> Any:
    env = parse_envelope(b'{"tool":"pay","arguments":{"n":1}}', message_id="m")
    rec = new_record(env, "pay", origin="q")
    approved, _ = apply_decision(
        rec, Decision(approval_id=rec.approval_id, approved=True, reviewer="ann")
    )
    return begin_run(approved, by="worker-1")


def test_a_dead_run_that_may_not_run_again_is_given_up() -> None:
    running = running_record()
    assert running.started_by == "worker-1" and running.runs == 1
    assert next_step(running) is Step.GIVE_UP
    assert next_step(running, idempotent=True) is Step.RERUN
    spent = running.model_copy(update={"runs": MAX_RUNS})
    assert next_step(spent, idempotent=True) is Step.GIVE_UP
    unknown = give_up(running)
    assert unknown.state is ApprovalState.UNKNOWN and unknown.unknown_at
    assert next_step(unknown) is Step.DONE
    assert settled_reply(unknown)["outcome"] == "unknown"
    with pytest.raises(ApprovalConflict):
        give_up(unknown)


def test_resolutions_apply_to_unknown_records_only() -> None:
    unknown = give_up(running_record())
    ran = Resolution(
        approval_id=unknown.approval_id, resolution="ran", reviewer="bob", result={"paid": 1}
    )
    done = apply_resolution(unknown, ran, now="2026-01-01T00:00:00Z")
    assert done.state is ApprovalState.DONE and done.resolved_at == "2026-01-01T00:00:00Z"
    assert done.reply == {
        "status": "ok",
        "tool": "pay",
        "run_id": unknown.run_id,
        "call_id": unknown.call_id,
        "approval_id": unknown.approval_id,
        "result": {"paid": 1},
        "resolved_by": "bob",
    }
    with pytest.raises(ApprovalConflict):
        apply_resolution(done, ran)
    with pytest.raises(ApprovalConflict):
        apply_resolution(running_record(), ran)
    not_run = Resolution(approval_id=unknown.approval_id, resolution="not_run", reviewer="bob")
    again = apply_resolution(unknown, not_run)
    assert again.state is ApprovalState.APPROVED and again.unknown_at is None
    unknown_again = give_up(begin_run(again))
    assert unknown_again.runs == 2
    with pytest.raises(ApprovalConflict):
        apply_resolution(unknown_again, not_run)
    with pytest.raises(ToolUsageError):
        apply_resolution(unknown, not_run.model_copy(update={"approval_id": "other"}))


def test_reviewer_messages_are_parsed_strictly() -> None:
    plain = b'{"approval_id":"a","approved":true,"reviewer":"r"}'
    assert isinstance(parse_reviewer_message(plain), Decision)
    ran = b'{"approval_id":"a","resolution":"ran","reviewer":"r","result":[1,2]}'
    parsed = parse_reviewer_message(ran)
    assert isinstance(parsed, Resolution) and parsed.result == [1, 2]
    for bad in (
        b'{"approval_id":"a","resolution":"maybe","reviewer":"r"}',
        b'{"approval_id":"a","resolution":"ran","reviewer":"r","extra":1}',
        b'{"approval_id":"a","resolution":"ran","approved":true,"reviewer":"r"}',
        b'{"approval_id":"a","resolution":"ran"}',
        b'{"approval_id":"a","approved":true,"reviewer":"r","extra":1}',
    ):
        with pytest.raises(ToolUsageError):
            parse_reviewer_message(bad)
    with pytest.raises(ToolUsageError):  # a plain decision never takes a resolution's keys
        parse_decision(ran)


async def test_a_host_marks_a_dead_non_idempotent_run_unknown_and_a_person_says_it_ran() -> None:
    runs: list[str] = []
    ex = executor(MemoryApprovalStore(), runs, idempotent=False)
    approval_id = await died_while_running(ex, ex.store)  # type: ignore[arg-type]
    reply = await handle_envelope(ex, {"approval_id": approval_id})
    assert reply["status"] == "already_done" and reply["outcome"] == "unknown"
    assert ex.store is not None
    assert [r.approval_id for r in await ex.store.list(ApprovalState.UNKNOWN)] == [approval_id]
    status, body = await resolve_outcome(ex, approval_id, reviewer="bob", ran=True, result=7)
    assert status == 200 and body["state"] == "done" and body["resolved_by"] == "bob"
    final = await handle_envelope(ex, {"approval_id": approval_id})
    assert final["status"] == "already_done"
    assert final["outcome"]["status"] == "ok" and final["outcome"]["result"] == 7
    assert runs == []
    status, problem = await resolve_outcome(ex, approval_id, reviewer="bob", ran=False)
    assert status == 409 and problem["kind"] == "ApprovalConflict"


async def test_a_host_runs_a_call_a_person_says_did_not_run_once_more_only() -> None:
    runs: list[str] = []
    ex = executor(MemoryApprovalStore(), runs, idempotent=False)
    approval_id = await died_while_running(ex, ex.store)  # type: ignore[arg-type]
    await handle_envelope(ex, {"approval_id": approval_id})  # → unknown
    status, body = await resolve_outcome(ex, approval_id, reviewer="bob", ran=False, reason="no")
    assert status == 200 and body["state"] == "approved"
    reply = await handle_envelope(ex, {"approval_id": approval_id})
    assert reply["status"] == "ok" and reply["result"] == {"paid": 3}
    assert len(runs) == 1
    status, _ = await resolve_outcome(ex, approval_id, reviewer="bob", ran=False)
    assert status == 409  # done: nothing more to resolve
    missing, problem = await resolve_outcome(ex, "nope", reviewer="bob", ran=True)
    assert missing == 404 and problem["kind"] == "ApprovalNotFound"


async def test_resolve_outcome_takes_the_backend_like_record_decision() -> None:
    """Both reviewer entry points accept an Executor or the Backend holding it."""
    runs: list[str] = []
    ex = executor(MemoryApprovalStore(), runs, idempotent=False)
    approval_id = await died_while_running(ex, ex.store)  # type: ignore[arg-type]
    await handle_envelope(ex, {"approval_id": approval_id})  # → unknown
    status, problem = await resolve_outcome(Backend(ex), approval_id, reviewer="", ran=True)
    assert status == 400 and problem["kind"] == "ToolUsageError"
    assert problem["detail"] == "malformed resolution"
    status, body = await resolve_outcome(Backend(ex), approval_id, reviewer="bob", ran=True)
    assert status == 200 and body["state"] == "done" and body["resolved_by"] == "bob"
    assert runs == []


async def test_a_host_waits_for_a_run_that_may_still_be_going() -> None:
    runs: list[str] = []
    ex = executor(MemoryApprovalStore(), runs, idempotent=False)
    approval_id = await died_while_running(ex, ex.store, age_s=0)  # type: ignore[arg-type]
    reply = await handle_envelope(ex, {"approval_id": approval_id})
    assert reply["status"] == "already_done" and reply["outcome"] == "unknown"
    assert ex.store is not None
    record = await ex.store.get(approval_id)
    assert record is not None and record.state is ApprovalState.RUNNING  # not given up yet
    status, _ = await resolve_outcome(ex, approval_id, reviewer="bob", ran=True)
    assert status == 409


def test_the_metric_counts_unknown_records_and_the_oldest_age() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    old = (now - timedelta(seconds=600)).isoformat()
    young = (now - timedelta(seconds=5)).isoformat()
    values = [
        orjson.dumps({"state": "unknown", "unknown_at": young}),
        orjson.dumps({"state": "unknown", "unknown_at": old}),
        orjson.dumps({"state": "pending"}),
        b"not json",
    ]
    assert unknown_outcomes(values, now) == (2, 600.0)
    assert unknown_outcomes([orjson.dumps({"state": "done"})], now) == (0, 0.0)


def test_it_did_not_run_is_refused_until_the_last_run_is_surely_over() -> None:
    limit = run_limit_s(None, 600.0, attempts=3, backoff_cap_s=5.0)
    assert limit == 3 * 600.0 + 2 * 5.0
    assert run_limit_s(2.0, 600.0) == 2.0
    record = _unknown_with_deadline(limit)
    assert record.started_at and record.started_by == "w1"
    not_run = Resolution(approval_id=record.approval_id, resolution="not_run", reviewer="bob")
    with pytest.raises(ApprovalConflict) as refused:
        apply_resolution(record, not_run)
    assert refused.value.status == 409
    assert record.run_deadline is not None and record.run_deadline in refused.value.detail
    later = instant(record.run_deadline)
    assert later is not None
    after = (later + timedelta(seconds=1)).isoformat()
    assert apply_resolution(record, not_run, now=after).state is ApprovalState.APPROVED
    ran = Resolution(
        approval_id=record.approval_id, resolution="ran", reviewer="bob", result={"x": 1}
    )
    assert apply_resolution(record, ran).state is ApprovalState.DONE


def _unknown_with_deadline(limit_s: float) -> ApprovalRecord:
    envelope = parse_envelope(b'{"tool":"wire_funds","arguments":{}}', message_id="m1")
    record = new_record(envelope, "wire_funds", origin="test")
    approve = Decision(approval_id=record.approval_id, approved=True, reviewer="ann")
    decided, _ = apply_decision(record, approve)
    return give_up(begin_run(decided, by="w1", limit_s=limit_s))
