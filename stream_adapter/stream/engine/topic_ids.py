"""Topic ids: the UUID a Kafka 2.8+ broker gives each topic incarnation, from Metadata v12.

aiokafka 0.14 speaks Metadata up to v5, which has no topic ids, so this module sends the one
request that carries them. A topic deleted and created again under its name gets a new id,
which is what makes delivery ids (`topic:partition:offset`) unique for the life of the data.
"""

from __future__ import annotations

import uuid
from io import BytesIO
from typing import Any

from aiokafka.errors import IncompatibleBrokerVersion
from aiokafka.protocol.abstract import AbstractType
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    Boolean,
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Schema,
    TaggedFields,
)

_NO_ID = bytes(16)


class _Uuid(AbstractType[bytes]):  # type: ignore[misc]  # aiokafka is untyped
    """A Kafka UUID: 16 raw bytes."""

    @classmethod
    def encode(cls, value: bytes) -> bytes:
        return value

    @classmethod
    def decode(cls, data: BytesIO) -> bytes:
        return data.read(16)


class _MetadataResponse_v12(Response):  # type: ignore[misc]  # aiokafka is untyped
    API_KEY = 3
    API_VERSION = 12
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "brokers",
            CompactArray(
                ("node_id", Int32),
                ("host", CompactString("utf-8")),
                ("port", Int32),
                ("rack", CompactString("utf-8")),
                ("tags", TaggedFields),
            ),
        ),
        ("cluster_id", CompactString("utf-8")),
        ("controller_id", Int32),
        (
            "topics",
            CompactArray(
                ("error_code", Int16),
                ("name", CompactString("utf-8")),
                ("topic_id", _Uuid),
                ("is_internal", Boolean),
                (
                    "partitions",
                    CompactArray(
                        ("error_code", Int16),
                        ("partition_index", Int32),
                        ("leader_id", Int32),
                        ("leader_epoch", Int32),
                        ("replica_nodes", CompactArray(Int32)),
                        ("isr_nodes", CompactArray(Int32)),
                        ("offline_replicas", CompactArray(Int32)),
                        ("tags", TaggedFields),
                    ),
                ),
                ("topic_authorized_operations", Int32),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class _MetadataRequest_v12(RequestStruct):  # type: ignore[misc]  # aiokafka is untyped
    FLEXIBLE_VERSION = True
    API_KEY = 3
    API_VERSION = 12
    RESPONSE_TYPE = _MetadataResponse_v12
    SCHEMA = Schema(
        (
            "topics",
            CompactArray(
                ("topic_id", _Uuid), ("name", CompactString("utf-8")), ("tags", TaggedFields)
            ),
        ),
        ("allow_auto_topic_creation", Boolean),
        ("include_topic_authorized_operations", Boolean),
        ("tags", TaggedFields),
    )


class _TopicIdsRequest(Request[_MetadataRequest_v12]):  # type: ignore[misc]  # aiokafka is untyped
    """Metadata of every topic (naming none, so no broker auto-creates one)."""

    API_KEY = 3

    def build(self, request_struct_class: type[_MetadataRequest_v12]) -> _MetadataRequest_v12:
        return request_struct_class(None, False, False, {})


async def topic_ids(client: Any) -> tuple[str, dict[str, str] | None]:
    """(cluster id, {topic: topic id}) from an aiokafka client; ("", None) when the broker is
    too old to name them (before Kafka 2.8)."""
    node = client.get_random_node()
    try:
        response = await client.send(node, _TopicIdsRequest())
    except (IncompatibleBrokerVersion, NotImplementedError):
        return "", None
    ids = {
        name: str(uuid.UUID(bytes=raw))
        for error, name, raw, *_ in response.topics
        if error == 0 and raw != _NO_ID
    }
    return response.cluster_id or "", ids
