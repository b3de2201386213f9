"""`ToolClient`: what an agent uses to call tools over Kafka and wait for their replies.

One producer sends every call (keyed by its run_id, so a run's calls keep their order) and
one `ReplyReader` reads the replies of every call in flight. Each call carries explicit ids
(fresh ones unless given), so the client knows the replies partition before it produces, and
positions the reader there first: no reply can slip past it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping
from types import TracebackType
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError

from stream_adapter.client.calls import CallHandle, OnReply, SentCall
from stream_adapter.client.reader import ReplyReader
from stream_adapter.core.envelope import parse_envelope
from stream_adapter.core.errors import AdapterError
from stream_adapter.core.ids import fresh_id, kafka_message_id
from stream_adapter.core.replies import Reply
from stream_adapter.kafka import clients as kafka_clients
from stream_adapter.kafka.connectivity import BrokerStatus, BrokerWatch
from stream_adapter.kafka.topic import partitions
from stream_adapter.settings import Settings

__all__ = ["FOLLOW_SLACK_MS", "ToolClient"]

FOLLOW_SLACK_MS = 60_000
"""How far before a call's `sent_at_ms` `follow` starts reading: the worker stamps replies
with its own clock, which may run behind the agent's."""

READ_MAX_WAIT_MS = 100
"""Longest the broker holds the reader's fetch when no reply comes. A partition added to the
reader is first fetched once the fetch in flight on the others returns (one request per
connection at a time): with aiokafka's 500 ms, a call to a partition not yet read waited
that long for its reply."""

OnSent = Callable[[SentCall], None]
"""Given the call's SentCall once it is produced (store it to follow the call after a restart)."""


class ToolClient:
    """Calls tools through the worker: `await client.call("add", {"a": 1, "b": 2})`.

    Use it as an async context manager (or `start()` / `close()`). Safe for any number of
    concurrent calls on one event loop. Connection, TLS, SASL and compression come from
    `Settings` (the environment, as for the worker). While started it watches the broker
    (`watch_broker`): one `broker unreachable` line when it goes, one `broker reachable again
    after N s` when it is back, the Kafka clients' retry lines collapsed (connectivity.py; one
    watch per process is enough, so further clients may pass False).
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        release_after_s: float = 60.0,
        headers: Mapping[str, bytes] | None = None,
        watch_broker: bool = True,
    ) -> None:
        self.settings = settings if settings is not None else Settings()
        self._watch_broker = watch_broker
        self._watch: BrokerWatch | None = None
        self._release_after_s = release_after_s
        self._headers = [(k, v) for k, v in (headers or {}).items()]
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._lookup: AIOKafkaConsumer | None = None
        self._reader: ReplyReader | None = None

    @property
    def reader(self) -> ReplyReader:
        """The shared reply reader (started)."""
        if self._reader is None:
            raise AdapterError("the ToolClient is not started (use `async with ToolClient()`)")
        return self._reader

    async def start(self) -> ToolClient:
        """Connect; a failure is one clear error (AuthenticationFailed, TlsFailed, ...)."""
        settings = self.settings
        consumer = kafka_clients.consumer(
            settings, isolation_level="read_committed", fetch_max_wait_ms=READ_MAX_WAIT_MS
        )
        await kafka_clients.start(settings, consumer)
        self._consumer = consumer
        try:
            # The reader's offset lookups go on a connection of their own (reader.py).
            self._lookup = await kafka_clients.start(
                settings, kafka_clients.consumer(settings, isolation_level="read_committed")
            )
            replies = await partitions(consumer, settings.replies_topic)
            await partitions(consumer, settings.calls_topic)  # else the producer waits 40 s
            self._producer = await kafka_clients.start(
                settings, kafka_clients.producer(settings, linger_ms=1)
            )
        except BaseException:
            await self.close()
            raise
        self._reader = ReplyReader(
            consumer,
            settings.replies_topic,
            len(replies),
            offsets=self._lookup,
            release_after_s=self._release_after_s,
        )
        self._reader.start()
        if self._watch_broker:  # once connected: a broker unreachable at start was the error
            self._watch = BrokerWatch.for_settings(settings)
            await self._watch.start()
        return self

    @property
    def broker(self) -> BrokerStatus | None:
        """The broker as this client sees it (None when not watching or not started)."""
        return None if self._watch is None else self._watch.status()

    async def close(self) -> None:
        """Stop reading and producing; open handles then fail with an AdapterError."""
        if self._watch is not None:
            await self._watch.stop()
            self._watch = None
        if self._reader is not None:
            await self._reader.stop()
            self._reader = None
        for client in (self._producer, self._consumer, self._lookup):
            if client is not None:
                with contextlib.suppress(Exception):  # closing: nothing left to tell
                    await client.stop()
        self._producer = self._consumer = self._lookup = None

    async def __aenter__(self) -> ToolClient:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def send(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        run_id: str | None = None,
        call_id: str | None = None,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        derive_ids: bool = False,
    ) -> CallHandle:
        """Produce one call and return the handle that follows its replies.

        The ids are fresh unless given; the Kafka key is the run_id unless given. With
        derive_ids the ids not given are left out, and the worker derives them from the call's
        delivery id (as for a call any Kafka client writes): the replies partition is known only
        once the call is written, so it is then read from a little before (as `follow` does).
        A call the worker would refuse as malformed is a ToolUsageError here, before anything
        is sent.
        """
        if derive_ids and (run_id is None or call_id is None):
            return await self._send_derived(tool, arguments, run_id, call_id, key, headers)
        run_id = run_id if run_id is not None else fresh_id("run_")
        call_id = call_id if call_id is not None else fresh_id("call_")
        body = {"tool": tool, "arguments": dict(arguments), "run_id": run_id, "call_id": call_id}
        parse_envelope(body)  # the worker would answer an error: say it before sending
        reader = self.reader
        watch = await reader.watch(run_id, call_id)
        sent_at_ms = time.time_ns() // 1_000_000
        try:
            message_id = await self._produce(
                body, key if key is not None else run_id.encode(), headers
            )
        except BaseException:
            reader.unwatch(watch)
            raise
        return CallHandle(SentCall(tool, run_id, call_id, message_id, sent_at_ms), reader, watch)

    async def _send_derived(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        run_id: str | None,
        call_id: str | None,
        key: bytes | None,
        headers: Mapping[str, bytes] | None,
    ) -> CallHandle:
        """`send` of a call whose missing ids the worker derives from its delivery id."""
        from stream_adapter.stream.topics import topic_scope

        body: dict[str, Any] = {"tool": tool, "arguments": dict(arguments)}
        body.update({k: v for k, v in (("run_id", run_id), ("call_id", call_id)) if v})
        parse_envelope(body)  # the worker would answer an error: say it before sending
        self.reader  # noqa: B018 - not started: say so before anything is sent
        sent_at_ms = time.time_ns() // 1_000_000
        if key is None and run_id is not None:
            key = run_id.encode()
        message_id = await self._produce(body, key, headers)
        scope = await topic_scope(self.settings, self.settings.calls_topic)
        settings = self.settings
        ids = parse_envelope(body, message_id=message_id, source=settings.source, scope=scope)
        return await self.follow(SentCall(tool, ids.run_id, ids.call_id, message_id, sent_at_ms))

    async def _produce(
        self, body: dict[str, Any], key: bytes | None, headers: Mapping[str, bytes] | None
    ) -> str:
        """Write body to the calls topic; its delivery id (`topic:partition:offset`)."""
        assert self._producer is not None
        extra = [(k, v) for k, v in (headers or {}).items()]
        try:
            meta = await self._producer.send_and_wait(
                self.settings.calls_topic,
                orjson.dumps(body),
                key=key,
                headers=[*self._headers, *extra] or None,
            )
        except KafkaError as exc:
            raise kafka_clients.kafka_error(exc, f"write {self.settings.calls_topic}") from None
        return kafka_message_id(self.settings.calls_topic, meta.partition, meta.offset)

    async def follow(self, sent: SentCall, *, since_ms: int | None = None) -> CallHandle:
        """A handle on a call sent earlier, by this process or one before it.

        The replies partition is read again from since_ms (epoch milliseconds; by default
        `FOLLOW_SLACK_MS` before the call was sent), so replies written while no client was
        reading are found, `pending_approval` included. Needs the topic to keep them
        (`retention.ms`).
        """
        start = sent.sent_at_ms - FOLLOW_SLACK_MS if since_ms is None else since_ms
        reader = self.reader
        watch = await reader.watch(sent.run_id, sent.call_id, since_ms=start)
        return CallHandle(sent, reader, watch)

    async def call(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        run_id: str | None = None,
        call_id: str | None = None,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        timeout_s: float | None = None,
        on_pending: OnReply | None = None,
        on_reply: OnReply | None = None,
        on_sent: OnSent | None = None,
    ) -> Reply:
        """Send a call and return its final reply (see `CallHandle.result`).

        Waits through `pending_approval` (given to on_pending); raises the contract's typed
        error for an `error` reply, and ReplyTimeout after timeout_s (which spans the wait for
        a reviewer). Cancelling stops the wait, not the call: a produced call cannot be
        unsent.
        """
        handle = await self.send(
            tool, arguments, run_id=run_id, call_id=call_id, key=key, headers=headers
        )
        try:
            if on_sent is not None:
                on_sent(handle.sent)
            return await handle.result(
                timeout_s=timeout_s, on_pending=on_pending, on_reply=on_reply
            )
        finally:
            handle.close()

    async def replies(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        run_id: str | None = None,
        call_id: str | None = None,
        key: bytes | None = None,
    ) -> AsyncIterator[Reply]:
        """Send a call and yield each of its replies as it comes, the final one last (an
        `error` reply is yielded, not raised)."""
        async with await self.send(
            tool, arguments, run_id=run_id, call_id=call_id, key=key
        ) as handle:
            async for reply in handle:
                yield reply
