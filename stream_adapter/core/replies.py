"""Reply builders (contract §5): every reply carries status, tool, run_id and call_id."""

from __future__ import annotations

from typing import Any, Literal

from stream_adapter.core import errors
from stream_adapter.core.errors import AdapterError, ToolFailed, problem

__all__ = [
    "Reply",
    "already_done_reply",
    "error_reply_body",
    "is_final",
    "ok_reply",
    "pending_reply",
    "reply_error",
]

Reply = dict[str, Any]
"""A JSON-safe reply: the value written to `tool-replies` and what handle_envelope returns."""


def _base(status: str, tool: str | None, run_id: str, call_id: str) -> Reply:
    return {"status": status, "tool": tool, "run_id": run_id, "call_id": call_id}


def ok_reply(
    tool: str, run_id: str, call_id: str, result: Any, approval_id: str | None = None
) -> Reply:
    """The call ran; result is its JSON-safe return value."""
    reply = _base("ok", tool, run_id, call_id)
    if approval_id is not None:
        reply["approval_id"] = approval_id
    reply["result"] = result
    return reply


def pending_reply(tool: str, run_id: str, call_id: str, approval_id: str) -> Reply:
    """The call is parked; a reviewer's decision will resume it."""
    reply = _base("pending_approval", tool, run_id, call_id)
    reply["approval_id"] = approval_id
    return reply


def already_done_reply(
    tool: str,
    run_id: str,
    call_id: str,
    approval_id: str,
    outcome: Reply | Literal["unknown"],
) -> Reply:
    """The decision was already used; outcome is the stored terminal reply or "unknown"."""
    reply = _base("already_done", tool, run_id, call_id)
    reply["approval_id"] = approval_id
    reply["outcome"] = outcome
    return reply


def error_reply_body(
    exc: BaseException,
    *,
    tool: str | None,
    run_id: str,
    call_id: str,
    approval_id: str | None = None,
) -> Reply:
    """An error reply whose `error` is the RFC 9457 problem for exc (topology only)."""
    reply = _base("error", tool, run_id, call_id)
    if approval_id is not None:
        reply["approval_id"] = approval_id
    reply["error"] = problem(exc)
    return reply


def is_final(reply: Reply) -> bool:
    """True for every reply but `pending_approval`: nothing more follows it for its call."""
    return reply.get("status") != "pending_approval"


def reply_error(reply: Reply) -> AdapterError | None:
    """The typed error an `error` reply (or an `already_done` one whose outcome is an error)
    stands for, carrying that reply as `reply`; None for every other reply.

    The class is the problem's `kind` (contract §6); a kind this version does not know becomes
    a ToolFailed with the same status and retryable flag.
    """
    if reply.get("status") == "already_done" and isinstance(reply.get("outcome"), dict):
        reply = reply["outcome"]
    if reply.get("status") != "error":
        return None
    body = reply.get("error")
    found: dict[str, Any] = body if isinstance(body, dict) else {}
    kind = getattr(errors, str(found.get("kind", "")), None)
    cls = kind if isinstance(kind, type) and issubclass(kind, AdapterError) else ToolFailed
    status, retryable = found.get("status"), found.get("retryable")
    exc = cls(
        str(found.get("detail") or cls.title),
        status=status if type(status) is int else None,
        retryable=retryable if type(retryable) is bool else None,
        tool=reply.get("tool"),
        run_id=reply.get("run_id"),
        call_id=reply.get("call_id"),
        approval_id=reply.get("approval_id"),
    )
    exc.reply = reply
    return exc
