"""Committed offsets that wait for a pending transactional commit (OffsetFetch v7).

Exactly once, a partition's offsets are committed inside its transaction; the group
coordinator makes them visible only when the transaction's marker reaches its log, a moment
after the producer's `EndTxn` returned. aiokafka asks with OffsetFetch v3, which the
coordinator answers meanwhile with the offset from before: a new owner then starts there and
answers that transaction's calls again, committed twice. With `require_stable` (KIP-447, as
the Java consumer sends whenever it reads committed records) the coordinator answers
UNSTABLE_OFFSET_COMMIT instead, and the fetch is retried until the commit is complete.
Installed by engine/patches.py over `GroupCoordinator._do_fetch_commit_offsets`; a broker
without OffsetFetch v7 (before Kafka 2.5) gets aiokafka's own request.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import errors as kafka_errors
from aiokafka.consumer.group_coordinator import UNKNOWN_OFFSET
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    Boolean,
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)
from aiokafka.structs import OffsetAndMetadata, TopicPartition


class UnstableOffsetCommit(kafka_errors.BrokerResponseError):  # type: ignore[misc]  # aiokafka is untyped
    """The partition's offsets are being committed in a transaction: ask again shortly."""

    errno = 88
    message = "UNSTABLE_OFFSET_COMMIT"
    description = "A transactional offset commit for the partition is pending."
    retriable = True


class OffsetFetchResponse_v7(Response):  # type: ignore[misc]  # aiokafka is untyped
    API_KEY = 9
    API_VERSION = 7
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "topics",
            CompactArray(
                ("topic", CompactString("utf-8")),
                (
                    "partitions",
                    CompactArray(
                        ("partition", Int32),
                        ("offset", Int64),
                        ("leader_epoch", Int32),
                        ("metadata", CompactString("utf-8")),
                        ("error_code", Int16),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("error_code", Int16),
        ("tags", TaggedFields),
    )


class OffsetFetchRequest_v7(RequestStruct):  # type: ignore[misc]  # aiokafka is untyped
    FLEXIBLE_VERSION = True
    API_KEY = 9
    API_VERSION = 7
    RESPONSE_TYPE = OffsetFetchResponse_v7
    SCHEMA = Schema(
        ("group_id", CompactString("utf-8")),
        (
            "topics",
            CompactArray(
                ("name", CompactString("utf-8")),
                ("partition_indexes", CompactArray(Int32)),
                ("tags", TaggedFields),
            ),
        ),
        ("require_stable", Boolean),
        ("tags", TaggedFields),
    )


class StableOffsetFetchRequest(Request[OffsetFetchRequest_v7]):  # type: ignore[misc]  # aiokafka is untyped
    """OffsetFetch of some partitions, answered only once no transaction commits them."""

    API_KEY = 9

    def __init__(self, group_id: str, partitions: list[tuple[str, list[int]]]) -> None:
        self._group_id = group_id
        self._partitions = partitions

    def build(self, request_struct_class: type[OffsetFetchRequest_v7]) -> OffsetFetchRequest_v7:
        topics: list[tuple[str, list[int], dict[int, bytes]]] = [
            (topic, partitions, {}) for topic, partitions in self._partitions
        ]
        return request_struct_class(self._group_id, topics, True, {})


Fetch = Callable[[Any, Any], Awaitable[dict[TopicPartition, OffsetAndMetadata]]]


def stable_fetch(fetch: Fetch) -> Fetch:
    """`GroupCoordinator._do_fetch_commit_offsets` asking with require_stable (aiokafka's
    own, `fetch`, where the broker has no OffsetFetch v7)."""

    async def _do_fetch_commit_offsets(
        self: Any, partitions: Any
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        if getattr(self, "_stream_adapter_unstable_unsupported", False):
            return await fetch(self, partitions)
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        request = StableOffsetFetchRequest(self.group_id, list(by_topic.items()))
        try:
            response = await self._send_req(request)
        except (NotImplementedError, kafka_errors.IncompatibleBrokerVersion):
            self._stream_adapter_unstable_unsupported = True
            return await fetch(self, partitions)
        return _offsets(self, response)

    return _do_fetch_commit_offsets


def _offsets(coordinator: Any, response: Any) -> dict[TopicPartition, OffsetAndMetadata]:
    """The committed offsets of an OffsetFetch v7 response; its errors raised as aiokafka's
    own handling of v3 raises them (retriable ones are asked again by its callers)."""
    _raise_for(coordinator, response.error_code, None)
    offsets: dict[TopicPartition, OffsetAndMetadata] = {}
    for topic, partitions, _ in response.topics:
        for partition, offset, _epoch, metadata, error_code, _ in partitions:
            tp = TopicPartition(topic, partition)
            if error_code == kafka_errors.UnknownTopicOrPartitionError.errno:
                continue
            _raise_for(coordinator, error_code, tp)
            if offset != UNKNOWN_OFFSET:
                offsets[tp] = OffsetAndMetadata(offset, metadata or "")
    return offsets


def _raise_for(coordinator: Any, error_code: int, tp: TopicPartition | None) -> None:
    if error_code == 0:
        return
    if error_code == UnstableOffsetCommit.errno:
        raise UnstableOffsetCommit(str(tp))
    error_type = kafka_errors.for_code(error_code)
    if error_type is kafka_errors.NotCoordinatorForGroupError:
        coordinator.coordinator_dead()
        raise error_type()
    if error_type is kafka_errors.GroupAuthorizationFailedError:
        raise error_type(coordinator.group_id)
    if error_type.retriable:
        raise error_type()
    raise kafka_errors.KafkaError(repr(error_type()))
