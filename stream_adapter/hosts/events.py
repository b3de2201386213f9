"""Function-host event documents (SQS, EventBridge, MSK / Kafka, direct) as delivered messages.

Pure parsing, no I/O: each message keeps its body and the delivery id its source keeps stable
across redeliveries, so a redelivered call derives the same ids (contract §3, §15).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from stream_adapter.core.errors import ToolUsageError
from stream_adapter.core.ids import kafka_message_id

__all__ = [
    "KAFKA_EVENT_SOURCES",
    "EventKind",
    "Message",
    "event_kind",
    "is_fifo",
    "kafka_message_id",
    "kafka_messages",
    "optional_id",
    "sqs_messages",
]

KAFKA_EVENT_SOURCES = frozenset({"aws:kafka", "SelfManagedKafka"})


class EventKind(StrEnum):
    """What a function host handed over; the value is also the ids' `source`."""

    SQS = "sqs"
    KAFKA = "kafka"
    EVENTBRIDGE = "eventbridge"
    DIRECT = "lambda"


@dataclass(frozen=True)
class Message:
    """One delivered message: its delivery id, its body, its ordering group, how often it was
    delivered (SQS's ApproximateReceiveCount) and the queue it came from (its ARN)."""

    message_id: str
    body: bytes | str | Mapping[str, Any]
    group: str = ""
    attempts: int = 1
    source_arn: str = ""


def event_kind(event: Any) -> EventKind:
    """Classify an event; anything unrecognised is the envelope itself (a direct invoke).

    Envelopes never carry ``Records``, ``records`` or ``detail-type`` (strict keys), so an
    event with them cannot be mistaken for a call.
    """
    if isinstance(event, Mapping):
        if isinstance(event.get("Records"), list):
            return EventKind.SQS
        if event.get("eventSource") in KAFKA_EVENT_SOURCES and isinstance(
            event.get("records"), Mapping
        ):
            return EventKind.KAFKA
        if "detail-type" in event and "detail" in event:
            return EventKind.EVENTBRIDGE
    return EventKind.DIRECT


def _text(record: Mapping[str, Any], key: str, what: str) -> str:
    """record[key] as a non-empty str (an int counts as its digits); ToolUsageError otherwise."""
    value = record.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value:
        raise ToolUsageError(f"{what} without a {key}")
    return value


def _mapping(value: Any) -> Mapping[str, Any]:
    """value when it is an object; an empty one for null or anything else a host may send."""
    return value if isinstance(value, Mapping) else {}


def optional_id(value: Any) -> str:
    """A delivery id a host may omit: its text (an int counts as its digits), or "" when it
    is missing, null or of another type, so the call gets fresh ids rather than "None"."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return ""


def _count(value: Any) -> int:
    """A receive count as SQS sends it (digits as text); 1 when missing or odd."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 10:
        return max(1, int(value))
    return 1


def sqs_messages(event: Mapping[str, Any]) -> list[Message]:
    """The messages of an SQS batch in order; ToolUsageError when a record cannot be named.

    Anything else odd in a record (a null or non-object ``attributes``, a missing or non-text
    body) fails only that message, by its id, like any malformed envelope.
    """
    records: Sequence[Any] = event["Records"]
    messages = []
    for record in records:
        if not isinstance(record, Mapping):
            raise ToolUsageError("SQS record is not an object")
        message_id = _text(record, "messageId", "SQS record")
        body = record.get("body")
        attributes = _mapping(record.get("attributes"))
        group = attributes.get("MessageGroupId")
        group = group if isinstance(group, str) else ""
        arn = record.get("eventSourceARN")
        messages.append(
            Message(
                message_id,
                body if isinstance(body, str) else "",
                group,
                _count(attributes.get("ApproximateReceiveCount")),
                arn if isinstance(arn, str) else "",
            )
        )
    return messages


def is_fifo(event: Mapping[str, Any]) -> bool:
    """True for a batch from a FIFO queue (its ARN ends in ``.fifo``)."""
    return any(
        isinstance(record, Mapping) and str(record.get("eventSourceARN", "")).endswith(".fifo")
        for record in event["Records"]
    )


def _kafka_value(record: Mapping[str, Any]) -> bytes | str:
    value = record.get("value")
    if not isinstance(value, str):
        return ""  # a tombstone or a missing value: parse_envelope refuses it
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return ""


def kafka_messages(event: Mapping[str, Any]) -> list[list[Message]]:
    """An MSK / self-managed Kafka batch as one list per topic-partition, in offset order.

    A value that is missing or not base64 becomes an empty body, which the envelope parser
    refuses like any other malformed message (so the record still fails by name).
    """
    groups = []
    for name, records in event["records"].items():
        if not isinstance(records, list):
            raise ToolUsageError("Kafka records are not a list")
        group: list[tuple[int, Message]] = []
        for record in records:
            if not isinstance(record, Mapping):
                raise ToolUsageError("Kafka record is not an object")
            topic = _text(record, "topic", "Kafka record")
            partition, offset = record.get("partition"), record.get("offset")
            if type(partition) is not int or type(offset) is not int:
                raise ToolUsageError("Kafka record without a partition and offset")
            message_id = kafka_message_id(topic, partition, offset)
            group.append((offset, Message(message_id, _kafka_value(record), str(name))))
        groups.append([message for _, message in sorted(group, key=lambda item: item[0])])
    return groups
