"""How large an approval record may grow in a store with a size limit (the approvals
changelog's records, DynamoDB's items).

A call is parked only when its pending record leaves room for every later step (a decision,
a resolution, a small outcome), so an approved call never starts a run whose record cannot be
written. A run whose outcome does not fit settles with a small `RecordTooLarge` error instead:
the tool ran, and its record says so.
"""

from __future__ import annotations

from stream_adapter.core.approvals import MAX_DECISION_BYTES, ApprovalRecord, finish
from stream_adapter.core.errors import RecordTooLarge
from stream_adapter.core.replies import Reply, error_reply_body

__all__ = ["STEP_ROOM_BYTES", "check_parkable", "finish_within", "record_bytes"]

STEP_ROOM_BYTES = 2 * MAX_DECISION_BYTES + (8 << 10)
"""Room a pending record keeps for what its later steps add: a decision, a person's
resolution (each at most MAX_DECISION_BYTES), run marks and a small error outcome."""


def record_bytes(record: ApprovalRecord) -> int:
    """The size of record as stored."""
    return len(record.to_bytes())


def check_parkable(record: ApprovalRecord, limit: int, *, where: str = "") -> None:
    """RecordTooLarge unless the pending record and its later steps fit within limit bytes
    (where: the limit's name, for the message)."""
    size = record_bytes(record)
    if size + STEP_ROOM_BYTES > limit:
        below = where or f"{limit} bytes"
        raise RecordTooLarge(
            f"the call's approval record ({size} bytes) leaves no room for its later steps "
            f"below {below}",
            tool=record.tool,
            run_id=record.run_id,
            call_id=record.call_id,
            approval_id=record.approval_id,
        )


def finish_within(record: ApprovalRecord, reply: Reply, limit: int | None) -> ApprovalRecord:
    """`finish(record, reply)`, or, when that record would exceed limit bytes, finished with a
    small RecordTooLarge error reply: the outcome is kept, never lost."""
    done = finish(record, reply)
    if limit is None:
        return done
    size = record_bytes(done)
    if size <= limit:
        return done
    error = RecordTooLarge(
        f"the tool ran, but its outcome makes an approval record of {size} bytes, "
        f"above {limit}; its result is not kept",
        tool=record.tool,
        approval_id=record.approval_id,
    )
    small = error_reply_body(
        error,
        tool=record.tool,
        run_id=record.run_id,
        call_id=record.call_id,
        approval_id=record.approval_id,
    )
    return finish(record, small)
