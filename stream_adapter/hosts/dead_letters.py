"""Dead letters of function hosts: a message whose failure retrying cannot help, kept aside.

The Kafka worker copies such a message to its dead-letter topic and acknowledges it (contract
§10). A function host does the same through a `DeadLetters` sink (an SQS queue:
sqs_dead_letters.py), so the queue does not deliver the message again and run its tool again.
Pure data here; what carries the letter is the sink's business.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import orjson

from stream_adapter.core.errors import AdapterError

__all__ = ["DeadLetter", "DeadLetters", "dead_letter"]


@dataclass(frozen=True)
class DeadLetter:
    """The original message, unchanged, and why it failed (the error's kind, never its text).

    body is the message as delivered: text as is, bytes (a Kafka record's value) as base64
    with `body_encoding` "base64".
    """

    message_id: str
    body: str
    body_encoding: str
    error_kind: str
    error_status: int
    retryable: bool
    attempts: int
    source: str
    source_arn: str
    group: str
    failed_at: str

    def attributes(self) -> dict[str, str]:
        """What the letter says about its failure, by the names of the worker's DLQ headers."""
        named = {
            "error-kind": self.error_kind,
            "error-status": str(self.error_status),
            "retryable": "true" if self.retryable else "false",
            "attempts": str(self.attempts),
            "source": self.source,
            "source-arn": self.source_arn,
            "message-id": self.message_id,
            "failed-at": self.failed_at,
            "body-encoding": self.body_encoding,
        }
        return {name: value for name, value in named.items() if value}


@runtime_checkable
class DeadLetters(Protocol):
    """Where a function host puts the messages it will not have delivered again."""

    async def send(self, letter: DeadLetter) -> None:
        """Keep letter; raise when it could not be kept (the message is then failed)."""
        ...


def _text(body: bytes | str | Mapping[str, Any]) -> tuple[str, str]:
    if isinstance(body, str):
        return body, ""
    if isinstance(body, bytes):
        return base64.b64encode(body).decode(), "base64"
    return orjson.dumps(body).decode(), ""


def dead_letter(
    *,
    message_id: str,
    body: bytes | str | Mapping[str, Any],
    exc: AdapterError,
    source: str,
    source_arn: str = "",
    group: str = "",
    attempts: int = 1,
) -> DeadLetter:
    """The dead letter of a message that failed with exc."""
    text, encoding = _text(body)
    return DeadLetter(
        message_id=message_id,
        body=text,
        body_encoding=encoding,
        error_kind=exc.kind,
        error_status=exc.status,
        retryable=exc.retryable,
        attempts=attempts,
        source=source,
        source_arn=source_arn,
        group=group,
        failed_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )
