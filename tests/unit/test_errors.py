"""The error hierarchy and its RFC 9457 problem objects."""

from __future__ import annotations

import pytest

from stream_adapter import (
    AdapterError,
    ApprovalConflict,
    ApprovalDenied,
    ApprovalInProgress,
    ApprovalNotFound,
    ToolFailed,
    ToolNotFound,
    ToolTimeout,
    ToolUsageError,
    error_reply,
    problem,
)


@pytest.mark.parametrize(
    ("cls", "status", "retryable"),
    [
        (ToolUsageError, 400, False),
        (ToolNotFound, 404, False),
        (ApprovalNotFound, 404, False),
        (ApprovalDenied, 403, False),
        (ApprovalConflict, 409, False),
        (ApprovalInProgress, 409, True),
        (ToolTimeout, 504, True),
        (ToolFailed, 500, False),
    ],
)
def test_kinds(cls: type[AdapterError], status: int, retryable: bool) -> None:
    exc = cls("what happened")
    assert isinstance(exc, AdapterError)
    assert (exc.kind, exc.status, exc.retryable) == (cls.__name__, status, retryable)
    code, body = error_reply(exc)
    assert code == status
    assert body == {
        "type": f"urn:stream-adapter:error:{cls.__name__}",
        "title": cls.title,
        "status": status,
        "detail": "what happened",
        "kind": cls.__name__,
        "retryable": retryable,
    }


def test_instance_overrides() -> None:
    exc = ToolUsageError("bad arguments", status=422)
    assert error_reply(exc)[0] == 422 and ToolUsageError.status == 400
    failed = ToolFailed("upstream busy", status=503, retryable=True)
    assert problem(failed)["status"] == 503 and problem(failed)["retryable"] is True
    assert ToolFailed.retryable is False


def test_detail_defaults_to_title_and_ids_ride_along() -> None:
    exc = ToolNotFound(tool="t", run_id="r", call_id="c", approval_id="a")
    assert exc.detail == "Tool not found"
    assert (exc.tool, exc.run_id, exc.call_id, exc.approval_id) == ("t", "r", "c", "a")


def test_foreign_exceptions_do_not_leak() -> None:
    code, body = error_reply(KeyError("secret-token"))
    assert code == 500 and body["kind"] == "ToolFailed" and body["retryable"] is False
    assert "secret" not in str(body)
