"""Who may decide what: a tool's calls by reviewers with its role, and nobody their own call.

One rule for the review service and the HTTP tool server. A call's caller is the name in its
``source`` (``<origin>:<caller>``, as hosts that authenticate callers write it, such as the
HTTP tool server). A reviewer is
that caller when the names match (case aside) or the reviewers file lists the caller name
among theirs (``callers``), so one person holding a caller token and a reviewer token never
decides or resolves their own call. A tool listed in REVIEW_TOOL_ROLES (``tool=role,...``) is
decided only by reviewers with one of its roles (``roles`` in the reviewers file).
"""

from __future__ import annotations

from collections.abc import Mapping

from stream_adapter.core import logs
from stream_adapter.core.approvals import ApprovalRecord
from stream_adapter.review.auth import Forbidden, Reviewer

__all__ = ["ToolRoles", "caller_of", "check_may_decide"]

ToolRoles = Mapping[str, frozenset[str]]


def caller_of(record: ApprovalRecord) -> str | None:
    """The caller named by the record's source (`<origin>:<caller>`, written by hosts that
    authenticate their callers), else None."""
    prefix = f"{record.origin}:"
    if record.source.startswith(prefix) and len(record.source) > len(prefix):
        return record.source[len(prefix) :]
    return None


def _same_person(caller: str, reviewer: Reviewer) -> bool:
    names = {reviewer.name.casefold(), *(c.casefold() for c in reviewer.callers)}
    return caller.casefold() in names


def check_may_decide(
    record: ApprovalRecord, reviewer: Reviewer | None, tool_roles: ToolRoles, *, act: str
) -> None:
    """Forbidden (logged with the reviewer) unless reviewer may `act` (decide, resolve) on
    record: a listed reviewer, not its caller, with one of the tool's roles if it has any."""
    why = None
    if reviewer is None:
        why = "the reviewer is no longer listed"
    else:
        caller = caller_of(record)
        needed = tool_roles.get(record.tool)
        if caller is not None and _same_person(caller, reviewer):
            why = f"nobody may {act} their own call"
        elif needed and not needed.intersection(reviewer.roles):
            why = f"to {act} {record.tool} calls takes the role {' or '.join(sorted(needed))}"
    if why is None:
        return
    logs.event(
        logs.WARNING,
        f"{act} refused",
        event="decision_forbidden",
        approval_id=record.approval_id,
        tool=record.tool,
        reviewer=reviewer.name if reviewer is not None else None,
    )
    raise Forbidden(why, approval_id=record.approval_id)
