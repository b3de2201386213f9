"""Errors the approval stores share: missing records, wrong states, unreachable backends."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from stream_adapter.core import logs
from stream_adapter.core.approvals import ApprovalRecord
from stream_adapter.core.errors import ApprovalConflict, ApprovalNotFound, BrokerError

__all__ = ["conflict", "missing", "unavailable_on"]


def missing(approval_id: str) -> ApprovalNotFound:
    """ApprovalNotFound naming (a prefix of) approval_id."""
    return ApprovalNotFound(f"no approval {approval_id[:80]!r}", approval_id=approval_id)


def conflict(record: ApprovalRecord) -> ApprovalConflict:
    """ApprovalConflict for a record no longer in the state a step needs."""
    return ApprovalConflict(
        f"approval is already {record.state}",
        tool=record.tool,
        run_id=record.run_id,
        call_id=record.call_id,
        approval_id=record.approval_id,
    )


@contextmanager
def unavailable_on(*kinds: type[BaseException]) -> Iterator[None]:
    """Map the backend's own errors (kinds) to a retryable BrokerError, at one boundary.

    A shared store that cannot be reached is infrastructure, like the broker, never the call's
    fault: the host redelivers the message later.
    """
    try:
        yield
    except kinds as exc:
        logs.event(logs.WARNING, "approval store unavailable", error_kind=type(exc).__name__)
        raise BrokerError("approval store unavailable") from exc
