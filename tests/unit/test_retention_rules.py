"""The pure rules of retention and expiry: what is settled, when it is due, what expiry answers;
the worker's sweep picks exactly the due records; topics report a retention too long."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from stream_adapter.core.approvals import (
    SETTLED_STATES,
    ApprovalRecord,
    ApprovalState,
    Decision,
    Step,
    apply_decision,
    begin_run,
    expire,
    expiry_due,
    finish,
    next_step,
    retention_due,
    settled_at,
)
from stream_adapter.core.errors import ApprovalConflict
from stream_adapter.settings import Settings
from stream_adapter.stream.sweeper import due_records
from stream_adapter.stream.topics import TopicState, topic_specs

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DAY = 86400.0


def _at(offset_s: float) -> str:
    return (T0 + timedelta(seconds=offset_s)).isoformat().replace("+00:00", "Z")


def _record(state: ApprovalState = ApprovalState.PENDING, **changes: object) -> ApprovalRecord:
    fields: dict[str, object] = {
        "approval_id": f"appr_{state}",
        "tool": "send_invoice",
        "arguments": {},
        "run_id": "r",
        "call_id": "c",
        "origin": "test",
        "requested_at": _at(0),
        "state": state,
    }
    return ApprovalRecord.model_validate(fields | changes)


def test_only_settled_states_are_removed_after_their_retention() -> None:
    assert {ApprovalState.DONE, ApprovalState.DENIED, ApprovalState.EXPIRED} == SETTLED_STATES
    later = T0 + timedelta(days=365)
    for state in ApprovalState:
        record = _record(state, settled_at=_at(0))
        assert retention_due(record, DAY, later) is (state in SETTLED_STATES), state
        assert not retention_due(record, None, later)  # no retention: kept for ever


def test_retention_counts_from_settling() -> None:
    approved = apply_decision(
        _record(), Decision(approval_id="appr_pending", approved=True, reviewer="ann")
    )[0]
    done = finish(begin_run(approved), {"status": "ok"}, now=_at(10 * DAY))
    assert settled_at(done) == T0 + timedelta(days=10)
    assert not retention_due(done, 7 * DAY, T0 + timedelta(days=16))
    assert retention_due(done, 7 * DAY, T0 + timedelta(days=17))
    denied = apply_decision(
        _record(), Decision(approval_id="appr_pending", approved=False, reviewer="ann"), now=_at(5)
    )[0]
    assert settled_at(denied) == T0 + timedelta(seconds=5)
    # A record settled before settled_at was kept counts from its latest known time.
    old = _record(ApprovalState.DONE, started_at=_at(3 * DAY), decided_at=_at(DAY))
    assert settled_at(old) == T0 + timedelta(days=3)


def test_expiry_is_off_by_default_and_only_for_pending() -> None:
    assert Settings().pending_expiry_s is None
    later = T0 + timedelta(hours=2)
    assert not expiry_due(_record(), None, later)
    assert expiry_due(_record(), 3600, later)
    assert not expiry_due(_record(), 3600, T0 + timedelta(minutes=59))
    for state in set(ApprovalState) - {ApprovalState.PENDING}:
        assert not expiry_due(_record(state), 3600, later)


def test_an_expired_record_answers_a_non_retryable_approval_expired() -> None:
    expired = expire(_record(), now=_at(60))
    assert expired.state is ApprovalState.EXPIRED and settled_at(expired) == T0 + timedelta(0, 60)
    assert expired.reply is not None and expired.reply["status"] == "error"
    error = expired.reply["error"]
    assert (error["kind"], error["status"], error["retryable"]) == ("ApprovalExpired", 410, False)
    assert next_step(expired) is Step.EXPIRED
    # A late decision changes nothing; expiring twice is a conflict.
    late = Decision(approval_id=expired.approval_id, approved=True, reviewer="ann")
    assert apply_decision(expired, late) == (expired, False)
    with pytest.raises(ApprovalConflict):
        expire(expired)


def test_the_worker_sweep_picks_the_due_records_only() -> None:
    now = T0 + timedelta(days=30)
    records = [
        _record(ApprovalState.DONE, approval_id="old-done", settled_at=_at(DAY)),
        _record(ApprovalState.DENIED, approval_id="recent-denied", settled_at=_at(29 * DAY)),
        _record(ApprovalState.PENDING, approval_id="old-pending"),
        _record(ApprovalState.UNKNOWN, approval_id="old-unknown"),
        _record(ApprovalState.RUNNING, approval_id="old-running", started_at=_at(0)),
    ]
    values = [r.to_bytes() for r in records] + [b"not json", b'{"state": "done"}']
    assert due_records(values, retention_s=14 * DAY, expiry_s=None, now=now) == ["old-done"]
    assert due_records(values, retention_s=14 * DAY, expiry_s=DAY, now=now) == [
        "old-done",
        "old-pending",
    ]


def test_topics_report_calls_or_decisions_kept_longer_than_settled_records() -> None:
    settings = Settings.for_app("ret", settled_retention_s=8 * DAY)
    specs = {s.role: s for s in topic_specs(settings)}
    assert specs["approvals table"].config["delete.retention.ms"] == "86400000"
    week_ms = str(7 * 86_400_000)
    for role in ("calls", "decisions"):
        spec = specs[role]
        size = {"max.message.bytes": spec.config["max.message.bytes"]}  # as topics create sets
        ok = TopicState(
            spec, True, spec.partitions, {**size, "retention.ms": week_ms}, replication_factor=1
        )
        assert ok.drift == []
        for retention in (str(8 * 86_400_000), "-1"):
            long = TopicState(
                spec,
                True,
                spec.partitions,
                {**size, "retention.ms": retention},
                replication_factor=1,
            )
            assert long.drift == [
                f"retention.ms={retention}, needs less than settled_retention_s "
                f"({8 * 86_400_000} ms): a redelivered message would no longer find its "
                "settled approval"
            ]
    replies = specs["replies"]
    size = {"max.message.bytes": replies.config["max.message.bytes"]}
    forever = TopicState(replies, True, replies.partitions, {**size, "retention.ms": "-1"})
    assert forever.drift == []


def test_the_review_page_shows_an_expired_approval_as_expired() -> None:
    from stream_adapter.review.pages import history, outcome
    from stream_adapter.review.view import DECIDED_STATES

    expired = expire(_record(), now=_at(60))
    assert ApprovalState.EXPIRED in DECIDED_STATES  # listed among recent decisions
    assert outcome(expired) == "expired, nobody decided in time"
    steps = history(expired, [])
    assert [step.kind for step in steps] == ["parked", "expired"]
    assert "ApprovalExpired" in steps[-1].title and steps[-1].at == _at(60)


async def test_the_sweeper_asks_once_per_due_record_until_it_may_ask_again() -> None:
    from typing import Any, cast

    from stream_adapter.stream.outputs import Outputs
    from stream_adapter.stream.sweeper import Sweeper

    asked: list[tuple[str, dict[str, Any]]] = []

    class Requests:
        async def request(self, approval_id: str, body: dict[str, Any]) -> None:
            asked.append((approval_id, body))

    old = _record(ApprovalState.DENIED, approval_id="old-denied", settled_at=_at(0))
    young = expire(_record(approval_id="young"), now=datetime.now(UTC).isoformat())
    values = [old.to_bytes(), young.to_bytes()]
    settings = Settings(settled_retention_s=DAY, approvals_sweep_interval_s=60)
    sweeper = Sweeper(settings, lambda: values, cast(Outputs, Requests()))
    assert await sweeper.sweep() == 1
    assert asked == [("old-denied", {"kind": "sweep", "approval_id": "old-denied"})]
    assert await sweeper.sweep() == 0  # its request is on its way: not asked twice
    assert len(asked) == 1
