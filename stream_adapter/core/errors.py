"""The one error hierarchy of the adapter, and its RFC 9457 problem form.

::

    AdapterError                 retryable? status
    ├── ToolUsageError           no   400 (422 for bad arguments)
    │   └── RecordTooLarge       no   413 (a record to write exceeds MAX_RECORD_BYTES)
    ├── ToolNotFound             no   404
    ├── ApprovalNotFound         no   404
    ├── ApprovalDenied           no   403
    ├── ApprovalConflict         no   409 (a decision or transition on a settled record)
    ├── ApprovalExpired          no   410 (nobody decided in time: PENDING_EXPIRY_S)
    ├── ApprovalInProgress       yes  409 (its approved run may still be going elsewhere)
    ├── TooManyPending           yes  429 (the source has MAX_PENDING_PER_SOURCE waiting)
    ├── ToolTimeout              yes  504
    ├── ToolFailed               the tool says (500, or the tool's own status)
    ├── Unauthenticated          no   401 (no credential, or one that names nobody current)
    ├── Forbidden                no   403 (a bad CSRF token, or a request the holder may not make)
    ├── TooManyFailures          no   429 (too many failed credentials from one address)
    ├── TokenChecksBusy          yes  503 (more tokens wait to be checked than are queued)
    ├── ConfigError              no   500 (a setting or the topology is wrong)
    ├── NotPending               no   409 (a command names an unknown or settled approval)
    └── BrokerError              yes  503 (the broker cannot be reached, started or set up)
        ├── AuthenticationFailed no   the cluster refused the SASL credentials
        ├── TlsFailed            no   the TLS handshake failed (e.g. an untrusted certificate)
        ├── NotAuthorized        no   an ACL refused an operation on a topic, group or id
        ├── CodecUnavailable     no   a compression codec cannot be used in this install
        └── TopicMissing         no   404 (a topic a command needs does not exist)

The client's `ReplyTimeout` (stream_adapter.client) is an `AdapterError` too: it carries the
sent call, so it lives with the client.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "AdapterError",
    "ApprovalConflict",
    "ApprovalDenied",
    "ApprovalExpired",
    "ApprovalInProgress",
    "ApprovalNotFound",
    "AuthenticationFailed",
    "BrokerError",
    "CodecUnavailable",
    "ConfigError",
    "Forbidden",
    "NotAuthorized",
    "NotPending",
    "RecordTooLarge",
    "TlsFailed",
    "TokenChecksBusy",
    "TooManyFailures",
    "TooManyPending",
    "ToolFailed",
    "ToolNotFound",
    "ToolTimeout",
    "ToolUsageError",
    "TopicMissing",
    "Unauthenticated",
    "error_reply",
    "problem",
]

PROBLEM_TYPE_PREFIX = "urn:stream-adapter:error:"


class AdapterError(Exception):
    """Base of every error the adapter reports; `kind` names it on the wire."""

    kind: ClassVar[str] = "AdapterError"
    title: ClassVar[str] = "Adapter error"
    status: int = 500
    retryable: bool = False
    reply: dict[str, Any] | None = None
    """The `error` reply this error was read from (`replies.reply_error`), else None."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.kind = cls.__name__

    def __init__(
        self,
        detail: str = "",
        *,
        status: int | None = None,
        retryable: bool | None = None,
        tool: str | None = None,
        run_id: str | None = None,
        call_id: str | None = None,
        approval_id: str | None = None,
    ) -> None:
        super().__init__(detail or self.title)
        self.detail = detail or self.title
        if status is not None:
            self.status = status
        if retryable is not None:
            self.retryable = retryable
        self.tool = tool
        self.run_id = run_id
        self.call_id = call_id
        self.approval_id = approval_id


class ToolUsageError(AdapterError):
    """A malformed envelope, bad arguments (422), or a record another origin owns."""

    title = "Bad tool call"
    status = 400


class RecordTooLarge(ToolUsageError):
    """A record the adapter would write (a reply, an approval record, a request) is larger
    than it may be; the call's fault, never retried."""

    title = "Record too large"
    status = 413


class ToolNotFound(AdapterError):
    """The tool is unknown or outside the allow-list; both read the same."""

    title = "Tool not found"
    status = 404


class ApprovalNotFound(AdapterError):
    """A resume or decision names an approval that does not exist."""

    title = "Approval not found"
    status = 404


class ApprovalDenied(AdapterError):
    """The reviewer said no."""

    title = "Approval denied"
    status = 403


class ApprovalConflict(AdapterError):
    """The approval is no longer in the state this step needs (first decision wins)."""

    title = "Approval already decided"
    status = 409


class ApprovalExpired(AdapterError):
    """Nobody decided the approval within its expiry; the call will not run."""

    title = "Approval expired"
    status = 410


class ApprovalInProgress(AdapterError):
    """The approved call's run started in another process and may still be going: ask later.

    Not a timeout: nothing timed out. A host cannot tell that run from a dead one until its
    tool's timeout has surely passed; a redelivery after that answers its outcome or runs it.
    """

    title = "Approved call in progress"
    status = 409
    retryable = True


class TooManyPending(AdapterError):
    """The call's source has MAX_PENDING_PER_SOURCE approvals waiting: decide some, retry."""

    title = "Too many pending approvals"
    status = 429
    retryable = True


class ToolTimeout(AdapterError):
    """The tool ran past its timeout; worth retrying."""

    title = "Tool timed out"
    status = 504
    retryable = True


class ToolFailed(AdapterError):
    """The tool raised; retryable when its exception type says so."""

    title = "Tool failed"
    status = 500
    original: BaseException | None = None
    """The tool's own exception, kept off the traceback chain so no log prints its text."""


class BrokerError(AdapterError):
    """The broker cannot be reached, started or set up (operations, not a call's fault)."""

    title = "Broker unavailable"
    status = 503
    retryable = True


class AuthenticationFailed(BrokerError):
    """The cluster refused the configured SASL credentials (or does not offer the mechanism)."""

    title = "Kafka authentication failed"
    retryable = False


class TlsFailed(BrokerError):
    """No TLS session: the broker's certificate is not trusted, or the handshake failed."""

    title = "Kafka TLS handshake failed"
    retryable = False


class NotAuthorized(BrokerError):
    """The cluster's ACLs refuse this principal an operation (a topic, a group, an id)."""

    title = "Not authorized by the Kafka cluster"
    status = 403
    retryable = False


class CodecUnavailable(BrokerError):
    """A compression codec cannot encode or decode in this installation."""

    title = "Compression codec unavailable"
    retryable = False


class Unauthenticated(AdapterError):
    """No credential, or one that does not name a current reviewer."""

    title = "Authentication required"
    status = 401


class Forbidden(AdapterError):
    """A form without a valid CSRF token (or a request the credential may not make)."""

    title = "Forbidden"
    status = 403


class TooManyFailures(AdapterError):
    """Too many failed credentials from one client address: wait, then try again."""

    title = "Too many failed sign-ins"
    status = 429

    def __init__(self, retry_after_s: float, *, first: bool = False) -> None:
        super().__init__("too many failed sign-ins from this address; try again later")
        self.retry_after_s = retry_after_s
        self.first = first
        """True for the first refusal since the address reached the limit (log it once)."""


class TokenChecksBusy(AdapterError):
    """More tokens wait to be checked than the service queues: try again shortly."""

    title = "Too many sign-ins at once"
    status = 503
    retryable = True
    retry_after_s = 1.0


class ConfigError(AdapterError):
    """A setting or the topology is wrong: nothing to retry until the configuration changes."""

    title = "Bad configuration"
    status = 500


class TopicMissing(BrokerError):
    """A topic the command needs does not exist on the broker."""

    title = "Topic missing"
    status = 404
    retryable = False


class NotPending(AdapterError):
    """An approval or reviewer a command names is unknown, or not in the state it needs."""

    title = "Not found or not pending"
    status = 409


def problem(exc: BaseException) -> dict[str, Any]:
    """The RFC 9457 problem object for exc, plus `kind` and `retryable`."""
    if not isinstance(exc, AdapterError):
        exc = ToolFailed("internal error", retryable=False)
    return {
        "type": PROBLEM_TYPE_PREFIX + exc.kind,
        "title": exc.title,
        "status": exc.status,
        "detail": exc.detail,
        "kind": exc.kind,
        "retryable": exc.retryable,
    }


def error_reply(exc: BaseException) -> tuple[int, dict[str, Any]]:
    """(http_status, problem) for HTTP hosts; foreign exceptions never leak their text."""
    body = problem(exc)
    return int(body["status"]), body
