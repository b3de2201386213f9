"""An in-process queue with ack, dead-letter and visibility-timeout redelivery.

Only for running the queue recipes in examples/ offline; Kafka is never faked.
"""

from __future__ import annotations

import uuid
from collections import Counter, deque
from dataclasses import dataclass, field


@dataclass(frozen=True)
class FakeMessage:
    """A delivered message: a stable id (kept across redeliveries) and the body."""

    id: str
    body: bytes


@dataclass
class FakeQueue:
    """Messages move ready → in flight → acked or dead-lettered; expire() redelivers."""

    ready: deque[FakeMessage] = field(default_factory=deque)
    in_flight: dict[str, FakeMessage] = field(default_factory=dict)
    acked: list[FakeMessage] = field(default_factory=list)
    dead: list[FakeMessage] = field(default_factory=list)
    deliveries: Counter[str] = field(default_factory=Counter)

    def send(self, body: bytes | str) -> FakeMessage:
        data = body.encode() if isinstance(body, str) else body
        message = FakeMessage(str(uuid.uuid4()), data)
        self.ready.append(message)
        return message

    async def receive(self, max_messages: int = 10) -> list[FakeMessage]:
        batch = []
        while self.ready and len(batch) < max_messages:
            message = self.ready.popleft()
            self.in_flight[message.id] = message
            self.deliveries[message.id] += 1
            batch.append(message)
        return batch

    async def ack(self, message: FakeMessage) -> None:
        self.acked.append(self.in_flight.pop(message.id))

    async def dead_letter(self, message: FakeMessage) -> None:
        self.dead.append(self.in_flight.pop(message.id))

    def expire(self) -> None:
        """The visibility timeout passes: every unacked message is delivered again."""
        self.ready.extend(self.in_flight.values())
        self.in_flight.clear()
