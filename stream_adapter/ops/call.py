"""`stream-adapter call`: produce one envelope and follow its replies (request-reply over Kafka).

The reply consumer is positioned at the end of every partition of the replies topic *before*
the call is produced, so no reply can slip past it. Replies are matched by run_id and
call_id: the ids the worker derives from the produced message's delivery id, computed here
with the same function (or the ids the caller gave).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiokafka.errors import KafkaError

from stream_adapter import kafka_clients
from stream_adapter.connectivity import RETRY_EVERY_S, BrokerChange, log_change, watching
from stream_adapter.envelope import parse_envelope
from stream_adapter.ids import kafka_message_id
from stream_adapter.ops.topic import consumer, partitions, producer, started
from stream_adapter.replies import Reply
from stream_adapter.settings import Settings
from stream_adapter.stream.topics import topic_scope

PENDING = "pending_approval"


@dataclass
class CallResult:
    """The produced call's delivery id and ids, and every reply seen for it, in order."""

    message_id: str
    run_id: str
    call_id: str
    replies: list[Reply] = field(default_factory=list)

    @property
    def final(self) -> Reply | None:
        """The last reply unless it is still pending_approval."""
        if self.replies and self.replies[-1].get("status") != PENDING:
            return self.replies[-1]
        return None


def envelope_for(
    tool: str, arguments: dict[str, Any], run_id: str | None, call_id: str | None
) -> dict[str, Any]:
    """The envelope to produce; ToolUsageError when it is not one the worker would accept."""
    body: dict[str, Any] = {"tool": tool, "arguments": arguments}
    if run_id is not None:
        body["run_id"] = run_id
    if call_id is not None:
        body["call_id"] = call_id
    parse_envelope(body)  # validate before anything is produced
    return body


async def call(
    settings: Settings,
    body: dict[str, Any],
    *,
    wait_s: float,
    key: bytes | None = None,
    on_sent: Callable[[CallResult], None] | None = None,
    on_reply: Callable[[Reply], None] | None = None,
    on_broker: Callable[[BrokerChange], None] = log_change,
) -> CallResult:
    """Produce body to the calls topic; collect its replies until a final one or wait_s.

    on_broker hears when the broker becomes unreachable and reachable again once the call is
    under way (connectivity.py; checked every few seconds, as the call is short; a broker that
    cannot be reached at the start is the one error raised instead).
    TopicMissing before anything is produced when the calls or replies topic does not exist.
    """
    async with (
        started(consumer(settings), settings) as replies,
        watching(settings, report=on_broker, check_every_s=RETRY_EVERY_S),
    ):
        tps = await partitions(replies, settings.replies_topic)
        await partitions(replies, settings.calls_topic)  # else the producer waits 40 s for it
        replies.assign(tps)
        await replies.seek_to_end(*tps)
        for tp in tps:
            await replies.position(tp)  # resolve "end" now, before the call exists
        async with started(producer(settings), settings) as calls:
            try:
                meta = await calls.send_and_wait(settings.calls_topic, orjson.dumps(body), key=key)
            except KafkaError as exc:
                raise kafka_clients.kafka_error(exc, f"write {settings.calls_topic}") from None
        message_id = kafka_message_id(settings.calls_topic, meta.partition, meta.offset)
        scope = await topic_scope(settings, settings.calls_topic)
        envelope = parse_envelope(body, message_id=message_id, source=settings.source, scope=scope)
        result = CallResult(message_id, envelope.run_id, envelope.call_id)
        if on_sent is not None:
            on_sent(result)
        await _follow(replies, result, wait_s, on_reply)
        return result


async def _follow(
    replies: Any, result: CallResult, wait_s: float, on_reply: Callable[[Reply], None] | None
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while (left := deadline - loop.time()) > 0:
        batches = await replies.getmany(timeout_ms=int(min(0.5, left) * 1000) or 1)
        for messages in batches.values():
            for message in messages:
                try:
                    reply = orjson.loads(message.value)
                except orjson.JSONDecodeError:
                    continue
                if (reply.get("run_id"), reply.get("call_id")) != (result.run_id, result.call_id):
                    continue
                result.replies.append(reply)
                if on_reply is not None:
                    on_reply(reply)
                if reply.get("status") != PENDING:
                    return
