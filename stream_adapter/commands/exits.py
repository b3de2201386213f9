"""Exit codes of `stream-adapter`, one per kind of failure, and the one line each failure prints.

Commands raise typed errors (`AdapterError` and its kinds, click's usage errors); the root
command turns whatever escapes into a single line on stderr, `Error (Kind): detail`, and the
exit code of its kind. Tracebacks are shown only at `--log-level debug`.
"""

from __future__ import annotations

from enum import IntEnum

import click
from pydantic import ValidationError

from stream_adapter.core.errors import (
    AdapterError,
    ApprovalConflict,
    ApprovalNotFound,
    AuthenticationFailed,
    BrokerError,
    CodecUnavailable,
    ConfigError,
    NotAuthorized,
    NotPending,
    TlsFailed,
    ToolUsageError,
    TopicMissing,
)


class ExitCode(IntEnum):
    """What a command's exit status means (the same for every command)."""

    OK = 0
    FAILED = 1
    USAGE = 2
    PENDING = 3
    NO_REPLY = 4
    NOT_PENDING = 5
    TOPICS = 6
    BROKER = 7
    CONFIG = 8
    AUTHENTICATION = 9
    TLS = 10
    NOT_AUTHORIZED = 11
    INTERRUPTED = 130

    @property
    def meaning(self) -> str:
        return MEANINGS[self]


MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: "done (call: an ok or already_done reply)",
    ExitCode.FAILED: "call: an error reply; chaos, fuzz: a check failed; or an unexpected error",
    ExitCode.USAGE: "bad usage: unknown option or command, bad value, missing argument",
    ExitCode.PENDING: "call: still pending approval when --wait ran out",
    ExitCode.NO_REPLY: "call: no reply within --wait",
    ExitCode.NOT_PENDING: (
        "no such approval or reviewer, or the approval is not pending (resolve: not unknown)"
    ),
    ExitCode.TOPICS: "a topic is missing or differs from what the settings ask for, or has "
    "under-replicated partitions",
    ExitCode.BROKER: "the broker cannot be reached, started or refused the request",
    ExitCode.CONFIG: "configuration: a bad value in the environment, the topology, or a codec",
    ExitCode.AUTHENTICATION: "Kafka refused the credentials (SASL_USERNAME, SASL_PASSWORD)",
    ExitCode.TLS: "no TLS session: the broker's certificate is not trusted, or a file is unusable",
    ExitCode.NOT_AUTHORIZED: "an ACL of the cluster refused an operation",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C)",
}


def code_for(exc: BaseException) -> ExitCode:
    """The exit code of a failure's kind."""
    if isinstance(exc, TopicMissing):
        return ExitCode.TOPICS
    if isinstance(exc, AuthenticationFailed):
        return ExitCode.AUTHENTICATION
    if isinstance(exc, TlsFailed):
        return ExitCode.TLS
    if isinstance(exc, NotAuthorized):
        return ExitCode.NOT_AUTHORIZED
    if isinstance(exc, CodecUnavailable):
        return ExitCode.CONFIG
    if isinstance(exc, BrokerError):
        return ExitCode.BROKER
    if isinstance(exc, NotPending | ApprovalNotFound | ApprovalConflict):
        return ExitCode.NOT_PENDING
    if isinstance(exc, ConfigError):
        return ExitCode.CONFIG
    if isinstance(exc, ToolUsageError):
        return ExitCode.USAGE
    if _from_aiokafka(exc):
        missing = type(exc).__name__ == "UnknownTopicOrPartitionError"
        return ExitCode.TOPICS if missing else ExitCode.BROKER
    if isinstance(exc, KeyboardInterrupt):
        return ExitCode.INTERRUPTED
    return ExitCode.FAILED


def line_for(exc: BaseException, *, broker: str = "") -> str:
    """One line saying what went wrong; never a value of the user's (arguments, secrets)."""
    if isinstance(exc, AdapterError):
        text = exc.detail
        if exc.approval_id and exc.approval_id not in text:
            text = f"{exc.approval_id}: {text}"
    elif _from_aiokafka(exc):
        where = f" at {broker}" if broker else ""
        text = f"the broker{where} did not answer as expected ({type(exc).__name__})"
    elif isinstance(exc, KeyboardInterrupt):
        text = "interrupted"
    elif isinstance(exc, ValidationError):
        text = "invalid settings: " + validation_text(exc)
    elif isinstance(exc, OSError):
        text = f"{exc.strerror or type(exc).__name__}: {exc.filename}" if exc.filename else str(exc)
    else:
        text = f"unexpected {type(exc).__name__} (run with --log-level debug for the traceback)"
    return first_line(text)


def first_line(text: str) -> str:
    """text's first line, saying how many more were left out."""
    head, *rest = text.strip().splitlines() or [""]
    return head if not rest else f"{head} ({len(rest)} more lines at --log-level debug)"


def validation_text(exc: ValidationError) -> str:
    """Field names and pydantic's messages; never the offending values."""
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or '(settings)'}: {err['msg']}"
        for err in exc.errors(include_input=False, include_url=False, include_context=False)
    )


def _from_aiokafka(exc: BaseException) -> bool:
    return type(exc).__module__.startswith("aiokafka")


def fail(exc: BaseException, *, broker: str = "", debug: bool = False) -> click.exceptions.Exit:
    """Print exc as one `Error:` line on stderr (the traceback too when debug); its Exit."""
    if debug and not isinstance(exc, KeyboardInterrupt):
        import traceback

        click.echo("".join(traceback.format_exception(exc)).rstrip(), err=True)
        if isinstance(exc, AdapterError) and "\n" in exc.detail:
            click.echo(exc.detail, err=True)
    label = f"Error ({exc.kind}):" if isinstance(exc, AdapterError) else "Error:"
    click.echo(f"{click.style(label, fg='red')} {line_for(exc, broker=broker)}", err=True)
    return click.exceptions.Exit(int(code_for(exc)))


def epilog() -> str:
    """The exit-code table for `--help` (click keeps lines after a \\b paragraph marker)."""
    rows = "\n".join(f"  {int(code):>3}  {code.meaning}" for code in ExitCode)
    return f"\b\nExit codes:\n{rows}"
