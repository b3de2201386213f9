"""Dead letters: read them, and replay those from the calls topic as the same calls.

A dead letter holds the original message's bytes and key; its headers say why it failed and
where it came from (contract §10). A replay re-derives the ids the worker gave the original
delivery (`derive_ids(message-id, source, scope)`, via `parse_envelope`, with the scope its
`source-topic-id` header names: none on letters written before scopes) and publishes the envelope
with those ids spelled out, so the replayed call is the same call: its reply carries the
original run_id and call_id, a confirm call finds its own approval record, and tools that key
side effects on call_id stay idempotent.

Not replayed (each reported with its reason): letters by reference (an original too large to
copy; its source headers say where it is), letters from any topic other than the calls
topic (decisions must come from the review service, freshly signed: decide again instead),
and originals that are not a valid envelope (no ids can be derived that the worker would
match; fix the producer and send a new call).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiokafka.errors import KafkaError

from stream_adapter.core.envelope import parse_envelope
from stream_adapter.core.errors import ToolUsageError
from stream_adapter.kafka import clients as kafka_clients
from stream_adapter.kafka.topic import producer, read_to_end, require_topic, started
from stream_adapter.settings import Settings

SCOPE_HEADER = "source-topic-id"
"""Dead-letter header naming the scope the original's ids were derived in (its topic's id)."""

REPLAY_HEADER = "replay-of"
"""Header on a replayed call naming the dead letter's original delivery id."""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One message of the dead-letter topic."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: dict[str, str]

    @property
    def kind(self) -> str:
        return self.headers.get("error-kind", "")

    @property
    def source_topic(self) -> str:
        return self.headers.get("source-topic", "")

    @property
    def message_id(self) -> str:
        return self.headers.get("message-id", "")

    def summary(self) -> dict[str, Any]:
        """What `dlq list` shows: where, why and when; never the payload."""
        return {
            "partition": self.partition,
            "offset": self.offset,
            "message_id": self.message_id,
            "source_topic": self.source_topic,
            "error_kind": self.kind,
            "error_status": _count(self.headers.get("error-status")),
            "retryable": _flag(self.headers.get("retryable")),
            "attempts": _count(self.headers.get("attempts")),
            "failed_at": self.headers.get("failed-at", ""),
            "bytes": len(self.value),
        }


def _flag(text: str | None) -> bool | None:
    return {"true": True, "false": False}.get(text or "")


def _count(text: str | None) -> int | None:
    try:
        return int(text or "")
    except ValueError:
        return None


async def read_letters(settings: Settings, *, kind: str | None = None) -> list[DeadLetter]:
    """Every dead letter present now, oldest first per partition; only `kind` when given."""
    letters: list[DeadLetter] = []
    async for message in read_to_end(settings, settings.dlq_topic):
        headers = {k: bytes(v).decode("utf-8", "replace") for k, v in message.headers or ()}
        letter = DeadLetter(message.partition, message.offset, message.key, message.value, headers)
        if kind is None or letter.kind == kind:
            letters.append(letter)
    return letters


def replay_value(settings: Settings, letter: DeadLetter) -> bytes:
    """The envelope to publish again, with the originally derived ids spelled out.

    Raises ReplaySkipped when the letter must not or cannot be replayed.
    """
    if letter.source_topic != settings.calls_topic:
        raise ReplaySkipped("not from the calls topic")
    if not letter.message_id:
        raise ReplaySkipped("no message-id header")
    if letter.headers.get("original") == "by-reference":
        raise ReplaySkipped("original too large to copy (read it at its source offset)")
    try:
        envelope = parse_envelope(
            letter.value,
            message_id=letter.message_id,
            source=settings.source,
            scope=letter.headers.get(SCOPE_HEADER, ""),
        )
    except ToolUsageError:
        raise ReplaySkipped("original is not a valid envelope") from None
    return orjson.dumps(envelope.to_payload())


class ReplaySkipped(Exception):
    """Why a dead letter is left where it is."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class ReplayReport:
    """What a replay did: letters republished, and the others by reason."""

    replayed: list[DeadLetter] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)


async def replay(
    settings: Settings,
    letters: Iterable[DeadLetter],
    *,
    limit: int | None = None,
    on_step: Callable[[DeadLetter, bool], None] | None = None,
) -> ReplayReport:
    """Republish replayable letters to the calls topic (at most limit), each acked by the broker."""
    report = ReplayReport()
    await require_topic(settings, settings.calls_topic)
    async with started(producer(settings), settings) as calls:
        for letter in letters:
            if limit is not None and len(report.replayed) >= limit:
                break
            try:
                value = replay_value(settings, letter)
            except ReplaySkipped as skip:
                report.skipped[skip.reason] = report.skipped.get(skip.reason, 0) + 1
                if on_step is not None:
                    on_step(letter, False)
                continue
            headers = [(REPLAY_HEADER, letter.message_id.encode())]
            try:
                await calls.send_and_wait(
                    settings.calls_topic, value, key=letter.key, headers=headers
                )
            except KafkaError as exc:
                raise kafka_clients.kafka_error(exc, f"write {settings.calls_topic}") from None
            report.replayed.append(letter)
            if on_step is not None:
                on_step(letter, True)
    return report
