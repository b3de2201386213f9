"""SqsDeadLetters: a function host's dead letters on an SQS queue (aiobotocore).

Each letter is the original body with the failure in message attributes, as the worker's
dead-letter topic keeps it in headers. A client is opened lazily per event loop.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field
from typing import Any

from aiobotocore.config import AioConfig
from aiobotocore.session import get_session

from stream_adapter.core.runners import LoopLocal
from stream_adapter.hosts.dead_letters import DeadLetter

__all__ = ["DEFAULT_CONFIG", "SqsDeadLetters"]

DEFAULT_CONFIG = AioConfig(
    connect_timeout=5, read_timeout=15, retries={"mode": "standard", "max_attempts": 3}
)
"""Bounded waits: an unreachable queue fails the message in seconds, which is delivered again."""


@dataclass
class _Conn:
    client: Any = None
    context: Any = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class SqsDeadLetters:
    """Sends dead letters to the SQS queue at queue_url (a FIFO one too).

    Credentials and region come from the usual AWS sources or from ``client_options`` (given
    to aiobotocore's ``create_client``; ``config`` replaces DEFAULT_CONFIG). The function's
    role needs ``sqs:SendMessage`` on the queue.
    """

    def __init__(
        self,
        queue_url: str,
        *,
        region_name: str | None = None,
        endpoint_url: str | None = None,
        **client_options: Any,
    ) -> None:
        if not queue_url:
            raise ValueError("SqsDeadLetters needs a queue URL")
        self.queue_url = queue_url
        self.region_name = region_name
        self.endpoint_url = endpoint_url
        self._options = client_options
        self._conns: LoopLocal[_Conn] = LoopLocal(_Conn)

    def __repr__(self) -> str:
        return f"SqsDeadLetters({self.queue_url!r})"

    async def _client(self) -> Any:
        conn = self._conns.get()
        if conn.client is None:
            async with conn.lock:
                if conn.client is None:
                    options = {"config": DEFAULT_CONFIG, **self._options}
                    context = get_session().create_client(
                        "sqs",
                        region_name=self.region_name,
                        endpoint_url=self.endpoint_url,
                        **options,
                    )
                    conn.client = await context.__aenter__()
                    conn.context = context
        return conn.client

    async def send(self, letter: DeadLetter) -> None:
        """Send letter; raises botocore's errors when the queue does not take it."""
        client = await self._client()
        request: dict[str, Any] = {
            "QueueUrl": self.queue_url,
            "MessageBody": letter.body,
            "MessageAttributes": {
                name: {"DataType": "String", "StringValue": value}
                for name, value in letter.attributes().items()
            },
        }
        if self.queue_url.endswith(".fifo"):
            # A redelivered message dead-lettered twice is one letter (5 min deduplication).
            key = f"{letter.source}:{letter.message_id}".encode()
            request["MessageGroupId"] = letter.group or "dead-letters"
            request["MessageDeduplicationId"] = hashlib.sha256(key).hexdigest()
        await client.send_message(**request)

    async def aclose(self) -> None:
        """Close the running loop's client (a fresh loop per invocation calls this)."""
        conn = self._conns.pop()
        if conn is not None and conn.context is not None:
            await conn.context.__aexit__(None, None, None)
