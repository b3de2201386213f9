"""What the topology writes: replies, dead letters and internal approval requests.

Every send here waits for the broker's acknowledgement, so a caller that acks its input
event afterwards never lets a commit pass an unwritten output (SPEC §8).
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from stream_adapter.errors import AdapterError
from stream_adapter.replies import Reply

CONTENT_TYPE = b"application/json"


@dataclass(frozen=True, slots=True)
class Delivery:
    """One consumed message: where it came from and its raw bytes."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: dict[str, bytes] = field(default_factory=dict)

    @property
    def message_id(self) -> str:
        """The delivery id: `topic:partition:offset`, stable across redeliveries."""
        return f"{self.topic}:{self.partition}:{self.offset}"

    def to_json(self) -> dict[str, Any]:
        """A JSON-safe copy, carried inside internal requests so dead letters keep the bytes."""
        return {
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "key": None if self.key is None else base64.b64encode(self.key).decode(),
            "value": base64.b64encode(self.value).decode(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Delivery:
        key = data.get("key")
        return cls(
            topic=data["topic"],
            partition=int(data["partition"]),
            offset=int(data["offset"]),
            key=None if key is None else base64.b64decode(key),
            value=base64.b64decode(data["value"]),
        )


class Outputs:
    """Sends to the replies, dead-letter and approval-request topics (Faust topics)."""

    def __init__(self, replies: Any, dlq: Any, requests: Any) -> None:
        self._replies = replies
        self._dlq = dlq
        self._requests = requests

    async def reply(self, reply: Reply, *, message_id: str) -> None:
        """Write reply keyed by its run_id, with the SPEC headers; wait for the ack."""
        headers = [("message-id", message_id.encode()), ("content-type", CONTENT_TYPE)]
        await _send(self._replies, reply["run_id"].encode(), orjson.dumps(reply), headers)

    async def dead_letter(self, delivery: Delivery, exc: AdapterError, *, attempts: int) -> None:
        """Copy the original message, unchanged, to the DLQ; headers say why."""
        headers = [
            ("error-kind", exc.kind.encode()),
            ("error-status", str(exc.status).encode()),
            ("retryable", b"true" if exc.retryable else b"false"),
            ("attempts", str(attempts).encode()),
            ("source-topic", delivery.topic.encode()),
            ("source-partition", str(delivery.partition).encode()),
            ("source-offset", str(delivery.offset).encode()),
            ("message-id", delivery.message_id.encode()),
            ("failed-at", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()).encode()),
        ]
        await _send(self._dlq, delivery.key, delivery.value, headers)

    async def request(self, approval_id: str, body: dict[str, Any]) -> None:
        """Hand a park or resume request to the owner of approval_id's partition."""
        await _send(self._requests, approval_id.encode(), orjson.dumps(body), None)


async def _send(topic: Any, key: bytes | None, value: bytes, headers: Any) -> None:
    # force=True: send now instead of attaching to the current event (which would publish
    # only at ack time, after we wait for this very acknowledgement).
    pending = await topic.send(key=key, value=value, headers=headers, force=True)
    await pending
