"""The scope of each input topic's delivery ids: its Kafka topic id, learnt once per assignment.

Offsets start again at 0 when a topic is deleted and created again, so `topic:partition:offset`
repeats; the topic id does not (a UUID per incarnation). Ids derived from a delivery go in
this scope (`ids.derive_ids`), so a call in a recreated topic never gets an old call's ids.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from stream_adapter.core import logs
from stream_adapter.core.errors import BrokerError

Lookup = Callable[[str], Awaitable[str]]


class Scopes:
    """Topic ids by topic name, looked up again after each partition assignment (a topic
    recreated meanwhile was assigned anew)."""

    def __init__(self, lookup: Lookup, generation: Callable[[], int]) -> None:
        self._lookup = lookup
        self._generation = generation
        self._known: dict[str, tuple[int, str]] = {}
        self._pending: dict[str, asyncio.Future[str]] = {}

    def current(self, topic: str) -> str | None:
        """topic's scope when known for the current assignment, else None (`get` it)."""
        known = self._known.get(topic)
        if known is None or known[0] != self._generation():
            return None
        return known[1]

    async def get(self, topic: str) -> str:
        """topic's scope, looked up once per assignment (concurrent callers share one
        lookup); a retryable BrokerError while the broker does not name the topic."""
        scope = self.current(topic)
        if scope is not None:
            return scope
        pending = self._pending.get(topic)
        if pending is None:
            pending = self._pending[topic] = asyncio.ensure_future(self._learn(topic))
            pending.add_done_callback(lambda _: self._pending.pop(topic, None))
        return await asyncio.shield(pending)

    async def prime(self, topic: str) -> None:
        """Learn topic's scope for the current assignment now; a broker that cannot name it
        yet leaves it to `get` (logged, not raised)."""
        try:
            await self.get(topic)
        except BrokerError as exc:
            logs.event(
                logs.WARNING, "topic id unknown; learnt later", topic=topic, error_kind=exc.kind
            )

    async def _learn(self, topic: str) -> str:
        generation = self._generation()
        try:
            scope = await self._lookup(topic)
        except LookupError as exc:
            raise BrokerError(f"no topic id for {topic}: {exc}", retryable=True) from None
        except Exception as exc:  # the broker did not answer: the caller asks again later
            raise BrokerError(
                f"no topic id for {topic}: {type(exc).__name__}", retryable=True
            ) from None
        if self._known.get(topic, (0, scope))[1] != scope:
            logs.event(
                logs.WARNING,
                "topic has a new topic id: it was deleted and created again",
                topic=topic,
            )
        self._known[topic] = (generation, scope)
        return scope
