"""What the engine hands the flows: a consumed record as plain data, and its headers.

`Record` is the shape of a consumed message as the engine's routes see it (Faust's `Message`
has it); `Delivery` is its immutable copy that a flow processes and carries in internal
requests. `current_delivery` names the message a job is processing: exactly once, its
transaction is the one every output joins.
"""

from __future__ import annotations

import base64
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

from stream_adapter.core.ids import kafka_message_id

Headers = list[tuple[str, bytes]]
"""Extra headers for an output record (the trace context when tracing is on)."""


class Record(Protocol):
    """A consumed message as a route receives it (read-only view)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...


INLINE_VALUE_BYTES = 16 << 10
"""An internal request carries its original message's bytes up to this size; a larger one
it refers to by (topic, partition, offset), so a request never outgrows the call it hands on."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """One consumed message: where it came from and its raw bytes."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: dict[str, bytes] = field(default_factory=dict)
    size: int | None = None
    """The original value's size when `value` does not hold it (a reference, from a
    request); None when it does."""

    @property
    def message_id(self) -> str:
        """The delivery id: `topic:partition:offset`, stable across redeliveries."""
        return kafka_message_id(self.topic, self.partition, self.offset)

    @property
    def by_reference(self) -> bool:
        """True when this copy names the message without its bytes."""
        return self.size is not None

    def to_json(self, *, value: bool = True) -> dict[str, Any]:
        """A JSON-safe copy, carried inside internal requests: the bytes too when value is
        true and they are at most INLINE_VALUE_BYTES, else a reference (their size)."""
        data: dict[str, Any] = {
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "key": None if self.key is None else base64.b64encode(self.key).decode(),
        }
        if value and not self.by_reference and len(self.value) <= INLINE_VALUE_BYTES:
            data["value"] = base64.b64encode(self.value).decode()
        else:
            data["size"] = len(self.value) if self.size is None else self.size
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Delivery:
        key = data.get("key")
        value = data.get("value")
        return cls(
            topic=data["topic"],
            partition=int(data["partition"]),
            offset=int(data["offset"]),
            key=None if key is None else base64.b64decode(key),
            value=b"" if value is None else base64.b64decode(value),
            size=None if value is not None else int(data.get("size", 0)),
        )


def delivery_of(message: Any) -> Delivery:
    """The Delivery of a consumed Faust message (its headers as a dict)."""
    headers = message.headers or {}
    if not isinstance(headers, dict):
        headers = dict(headers)
    return Delivery(
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        key=message.key,
        value=message.value if message.value is not None else b"",
        headers=headers,
    )


def message_id_of(record: Record) -> str:
    """The delivery id of a consumed record, as `Delivery.message_id` gives it."""
    return kafka_message_id(record.topic, record.partition, record.offset)


current_delivery: ContextVar[Delivery] = ContextVar("stream_adapter_delivery")
"""The message the running job processes: its transaction in exactly-once mode."""
