"""What the topology writes: replies, dead letters and internal approval requests.

Every send waits for the broker's acknowledgement (engine's `Sender`), so a job that acks its
message afterwards never lets a commit pass an unwritten output (contract §8). Exactly once,
replies and dead letters join the transaction of the message being processed.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from stream_adapter.core.envelope import MAX_ID_CHARS, MAX_RECORD_BYTES
from stream_adapter.core.errors import AdapterError
from stream_adapter.core.replies import Reply
from stream_adapter.stream.engine import Delivery, Headers, Sender, record_size
from stream_adapter.stream.metrics import Metrics

CONTENT_TYPE = b"application/json"
MAX_REFERENCE_KEY_BYTES = 4 * MAX_ID_CHARS
"""A dead letter by reference keeps its original key up to this size (a run_id's, in UTF-8)."""


SCOPE_HEADER = "source-topic-id"
"""Dead-letter header: the Kafka topic id of the original's topic, the scope of its ids."""


class Outputs:
    """Sends to the replies, dead-letter and approval-request topics, waiting for each ack."""

    def __init__(self, sender: Sender, *, replies: str, dlq: str, requests: str) -> None:
        self.sender = sender
        self._replies = replies
        self._dlq = dlq
        self._requests = requests
        self.metrics: Metrics | None = None

    @property
    def exactly_once(self) -> bool:
        return self.sender.exactly_once

    async def reply(self, reply: Reply, *, message_id: str, headers: Headers | None = None) -> None:
        """Write reply keyed by its run_id, with the contract's headers (and any extra headers)."""
        sent = [("message-id", message_id.encode()), ("content-type", CONTENT_TYPE)]
        if headers:
            sent.extend(headers)
        await self.sender.send(self._replies, reply["run_id"].encode(), orjson.dumps(reply), sent)
        if self.metrics is not None:
            self.metrics.replied(reply["tool"], reply["status"])

    async def dead_letter(
        self, delivery: Delivery, exc: AdapterError, *, attempts: int, scope: str = ""
    ) -> None:
        """Copy the original message, unchanged, to the DLQ; headers say why, and scope (its
        topic's id, in which its ids were derived) lets a replay keep them.

        A message too large to copy with its headers (or known here by reference only) goes
        by reference: no value, its key only when short, and `original: by-reference` with
        `original-bytes`; the source headers say where to read it while its topic keeps it.
        """
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
        if scope:
            headers.append((SCOPE_HEADER, scope.encode()))
        key, value = delivery.key, delivery.value
        if delivery.by_reference or record_size(key, value, headers) > MAX_RECORD_BYTES:
            size = delivery.size if delivery.size is not None else len(value)
            headers.append(("original", b"by-reference"))
            headers.append(("original-bytes", str(size).encode()))
            key = key if key is not None and len(key) <= MAX_REFERENCE_KEY_BYTES else None
            value = b""
        await self.sender.send(self._dlq, key, value, headers)
        if self.metrics is not None:
            self.metrics.dead_lettered(delivery.topic, exc.kind)

    async def request(self, approval_id: str, body: dict[str, Any]) -> None:
        """Hand a park or resume request to the owner of approval_id's partition.

        Exactly once, this send is outside the transaction on purpose: a transactional write
        leaves a commit marker after the last request, which the consumer's acked-offset
        commits never pass, so the approvals route's lag would never reach 0. The hand-off is
        at least once; parking and resuming are idempotent.
        """
        key, value = approval_id.encode(), orjson.dumps(body)
        if self.exactly_once:
            await self.sender.outside_transaction(self._requests, key, value, None)
        else:
            await self.sender.plain(self._requests, key, value, None)
