"""Approval records, decisions and the pure transitions."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stream_adapter import ApprovalRecord, ApprovalState, ToolUsageError, parse_decision
from stream_adapter.core.approvals import (
    Decision,
    Step,
    apply_decision,
    begin_run,
    denial,
    finish,
    new_record,
    next_step,
    settled_reply,
)
from stream_adapter.core.envelope import parse_envelope
from stream_adapter.core.errors import ApprovalConflict, ApprovalDenied
from stream_adapter.core.ids import approval_id_for


def record() -> ApprovalRecord:
    env = parse_envelope(b'{"tool":"pay","arguments":{"n":1}}', message_id="m", source="s")
    return new_record(env, "pay", origin="queue", now="2024-01-01T00:00:00Z")


def decision(approved: bool = True, **kw: Any) -> Decision:
    return Decision(approval_id=record().approval_id, approved=approved, reviewer="ann", **kw)


def test_new_record() -> None:
    rec = record()
    assert rec.state is ApprovalState.PENDING
    assert rec.approval_id == approval_id_for(rec.run_id, rec.call_id, rec.source)
    assert (rec.message_id, rec.source, rec.origin, rec.arguments) == ("m", "s", "queue", {"n": 1})
    assert ApprovalRecord.from_bytes(rec.to_bytes()) == rec


def test_record_bytes_are_strict() -> None:
    for bad in (b"{}", b"[]", b"nope", record().to_bytes().replace(b"pending", b"paused")):
        with pytest.raises(ToolUsageError):
            ApprovalRecord.from_bytes(bad)


def test_first_decision_wins() -> None:
    rec, changed = apply_decision(record(), decision(reason="fine"), now="t1")
    assert changed and rec.state is ApprovalState.APPROVED
    assert (rec.reviewer, rec.reason, rec.decided_at) == ("ann", "fine", "t1")
    again, changed = apply_decision(rec, decision(False))
    assert not changed and again is rec
    denied, _ = apply_decision(record(), decision(False))
    assert denied.state is ApprovalState.DENIED
    with pytest.raises(ToolUsageError):
        apply_decision(record(), Decision(approval_id="other", approved=True, reviewer="x"))


def test_run_lifecycle_and_steps() -> None:
    pending = record()
    assert next_step(pending) is Step.WAIT
    assert settled_reply(pending)["status"] == "pending_approval"
    approved, _ = apply_decision(pending, decision())
    assert next_step(approved) is Step.RUN
    with pytest.raises(ApprovalConflict):
        finish(approved, {})
    running = begin_run(approved)
    assert next_step(running, rerun_after_s=3600) is Step.DONE  # maybe still running
    assert next_step(running) is Step.GIVE_UP  # surely over: a person resolves it
    assert settled_reply(running)["outcome"] == "unknown"
    with pytest.raises(ApprovalConflict):
        begin_run(running)
    done = finish(running, {"status": "ok", "result": 1})
    reply = settled_reply(done)
    assert reply["status"] == "already_done" and reply["outcome"] == {"status": "ok", "result": 1}
    assert {"tool", "run_id", "call_id", "approval_id"} <= reply.keys()
    denied, _ = apply_decision(pending, decision(False, reason="secret reason"))
    assert next_step(denied) is Step.DENY
    exc = denial(denied)
    assert isinstance(exc, ApprovalDenied) and "secret" not in exc.detail
    with pytest.raises(ValueError):
        settled_reply(denied)


def test_parse_decision() -> None:
    d = parse_decision(b'{"approval_id":"a","approved":false,"reviewer":"r","reason":"no"}')
    assert (d.approval_id, d.approved, d.reviewer, d.reason) == ("a", False, "r", "no")
    assert parse_decision({"approval_id": "a", "approved": True, "reviewer": "r"}).approved
    assert parse_decision(
        '{"approval_id":"a","approved":true,"reviewer":"r","decided_at":"2024-01-01T00:00:00+00:00"}'
    ).decided_at


@pytest.mark.parametrize(
    "value",
    [
        b'{"approval_id":"a","approved":"yes","reviewer":"r"}',
        b'{"approval_id":"a","approved":1,"reviewer":"r"}',
        b'{"approval_id":"a","approved":true}',
        b'{"approval_id":"a","approved":true,"reviewer":""}',
        b'{"approval_id":"","approved":true,"reviewer":"r"}',
        b'{"approval_id":"a","approved":true,"reviewer":"r","tool":"x"}',
        b'{"approval_id":"a","approved":true,"reviewer":"r","decided_at":"yesterday"}',
        b'{"approval_id":"a","approved":true,"approved":false,"reviewer":"r"}',
        b"[]",
        b"\xff",
        b"",
    ],
)
def test_bad_decisions(value: bytes) -> None:
    with pytest.raises(ToolUsageError):
        parse_decision(value)


@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_decisions_fail_only_with_usage_errors(value: bytes) -> None:
    with contextlib.suppress(ToolUsageError):
        parse_decision(value)


def test_one_reading_of_times_for_records_decisions_and_stores() -> None:
    from datetime import UTC, datetime

    from stream_adapter.core.approvals import Decision, instant

    at = datetime(2024, 1, 1, 0, 5, tzinfo=UTC)
    assert instant("2024-01-01T00:05:00.000Z") == at
    assert instant("2024-01-01T01:05:00+01:00") == at
    assert instant("2024-01-01T00:05:00") == at  # naive: taken as UTC
    assert instant("yesterday") is None
    assert Decision(approval_id="a", approved=True, reviewer="r", decided_at="2024-01-01T00:05Z")
    with pytest.raises(ValueError, match="ISO 8601"):
        Decision(approval_id="a", approved=True, reviewer="r", decided_at="yesterday")
