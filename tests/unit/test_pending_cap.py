"""PendingCounts: pending approvals by source, kept as records change, and a refusal never
resting on a count older than `rebuild_s`."""

from __future__ import annotations

import pytest

from stream_adapter.core.approvals import ApprovalRecord, ApprovalState
from stream_adapter.core.pending import PendingCounts, TooManyPending


def raw(n: int, source: str, state: ApprovalState = ApprovalState.PENDING) -> bytes:
    return ApprovalRecord.model_validate(
        {
            "approval_id": f"appr_{n}",
            "tool": "send_invoice",
            "arguments": {"status": "pending"},
            "run_id": f"run-{n}",
            "call_id": "c",
            "origin": "kafka:t",
            "source": source,
            "state": state,
            "requested_at": "2024-01-01T00:00:00.000Z",
        }
    ).to_bytes()


def test_counts_follow_the_records_and_the_cap_refuses_typed() -> None:
    table = {n: raw(n, "a") for n in range(2)} | {9: raw(9, "b")}
    now = [0.0]
    counts = PendingCounts(lambda: list(table.values()), rebuild_s=10.0, clock=lambda: now[0])
    assert (counts.count("a"), counts.count("b"), counts.count("c")) == (2, 1, 0)
    with pytest.raises(TooManyPending) as raised:
        counts.admit("a", 2, tool="send_invoice")
    assert (raised.value.status, raised.value.retryable) == (429, True)
    counts.admit("a", 3)
    counts.admit("a", 0)  # no cap
    decided = raw(0, "a", ApprovalState.DENIED)
    counts.changed(table[0], decided)
    table[0] = decided
    counts.admit("a", 2)
    counts.changed(None, raw(5, "a"))
    counts.changed(raw(9, "b"), None)
    assert (counts.count("a"), counts.count("b")) == (2, 0)


def test_a_refusal_counts_again_when_the_count_is_old() -> None:
    table = {n: raw(n, "a") for n in range(3)}
    now = [0.0]
    counts = PendingCounts(lambda: list(table.values()), rebuild_s=10.0, clock=lambda: now[0])
    assert counts.count("a") == 3
    table.clear()  # records went elsewhere (another worker took the partition)
    with pytest.raises(TooManyPending):
        counts.admit("a", 3)  # counted a moment ago: trusted
    now[0] = 11.0
    counts.admit("a", 3)  # old: counted again, and there is room
    assert counts.count("a") == 0
