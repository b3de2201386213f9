"""The topology's topics: what they must be, creating them idempotently, and reporting drift
(partitions, replication factor, configs, a retention too long for SETTLED_RETENTION_S) and
partitions short of in-sync replicas."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from stream_adapter.core.approvals import ApprovalRecord
from stream_adapter.core.envelope import TOPIC_MAX_MESSAGE_BYTES
from stream_adapter.core.errors import BrokerError, NotAuthorized, ToolUsageError
from stream_adapter.kafka import clients as kafka_clients
from stream_adapter.kafka.topic import consumer, partitions, read_to_end, started
from stream_adapter.settings import Settings
from stream_adapter.stream.engine.topic_ids import topic_ids

_TOPIC_ALREADY_EXISTS = 36
_NOT_AUTHORIZED = (29, 31)  # topic, cluster authorization failed
_COMPACT = {"cleanup.policy": "compact"}
TOMBSTONE_RETENTION_MS = 86_400_000
"""`delete.retention.ms` of the approvals changelog: a removed record's tombstone stays a day
after compaction reaches it (a worker restoring meanwhile still reads it), then goes too."""
CREATE_SETTLE_S = 30.0
"""How long `create_topics` waits for the topics it created to show as specified, every
replica in sync: a cluster's brokers learn of a new topic a moment after the controller
created it, longer on a busy machine."""


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """One topic as the topology needs it."""

    name: str
    partitions: int
    replication_factor: int
    config: dict[str, str] = field(default_factory=dict)
    role: str = ""
    retention_below_ms: int | None = None
    """When set, the topic's `retention.ms` must be below it: a call or decision redelivered
    from the topic must still find its settled record (SETTLED_RETENTION_S)."""


@dataclass(frozen=True, slots=True)
class TopicState:
    """One topic as the broker has it, and how it differs from its spec."""

    spec: TopicSpec
    exists: bool
    partitions: int | None
    config: dict[str, str]
    created: bool = False
    replication_factor: int | None = None
    under_replicated: tuple[int, ...] = ()
    """Partitions with fewer in-sync replicas than replicas (a broker down or catching up)."""
    warnings: tuple[str, ...] = ()
    """What is worth knowing and is not drift: approval records that name an earlier
    incarnation of the calls topic (`older_incarnations`)."""

    @property
    def drift(self) -> list[str]:
        """Human-readable differences; empty when the topic is as specified."""
        if not self.exists:
            return ["missing"]
        out = []
        if self.partitions != self.spec.partitions:
            out.append(f"has {self.partitions} partitions, needs {self.spec.partitions}")
        rf = self.replication_factor
        if rf is not None and rf != self.spec.replication_factor:
            out.append(f"replication factor {rf}, needs {self.spec.replication_factor}")
        for key, want in self.spec.config.items():
            have = self.config.get(key)
            if have != want:
                out.append(f"{key}={have}, needs {want}")
        limit = self.spec.retention_below_ms
        retention = self.config.get("retention.ms")
        if limit is not None and retention is not None and not 0 <= int(retention) < limit:
            out.append(
                f"retention.ms={retention}, needs less than settled_retention_s ({limit} ms): "
                "a redelivered message would no longer find its settled approval"
            )
        return out

    @property
    def problems(self) -> list[str]:
        """The drift, and partitions short of in-sync replicas right now."""
        out = self.drift
        if self.under_replicated:
            listed = ", ".join(str(p) for p in self.under_replicated)
            out.append(f"under-replicated partitions: {listed}")
        return out


def approval_requests_topic(settings: Settings) -> str:
    """The internal topic that carries park and resume requests, keyed by approval_id."""
    return f"{settings.app_id}-approval-requests"


def topic_specs(settings: Settings) -> list[TopicSpec]:
    """Every topic the topology reads or writes (contract §2), with partitions and configs.

    The calls and decisions topics must keep messages for less than SETTLED_RETENTION_S
    (checked, not set: their retention is the broker's or the operator's); the approvals
    changelog drops tombstones a day after compaction (`TOMBSTONE_RETENTION_MS`).

    From replication 3 up every topic requires 2 in-sync replicas (`min_insync_replicas`):
    an acks=all write is then on two brokers before it is acknowledged, and one broker may
    be down without refusing writes.

    Every topic admits records of TOPIC_MAX_MESSAGE_BYTES (`max.message.bytes`): a call at
    the envelope cap, and whatever the worker writes for it within MAX_RECORD_BYTES, which it
    checks before each send. A lower limit would make the broker refuse what the worker
    checked (reported as drift).
    """
    p, rf = settings.partitions, settings.replication_factor
    base: dict[str, str] = {"max.message.bytes": str(TOPIC_MAX_MESSAGE_BYTES)}
    if settings.topic_min_insync is not None:
        base["min.insync.replicas"] = str(settings.topic_min_insync)
    settled_ms = int(settings.settled_retention_s * 1000)
    table = {**_COMPACT, "delete.retention.ms": str(TOMBSTONE_RETENTION_MS), **base}
    return [
        TopicSpec(settings.calls_topic, p, rf, dict(base), "calls", settled_ms),
        TopicSpec(settings.replies_topic, p, rf, dict(base), role="replies"),
        TopicSpec(settings.decisions_topic, p, rf, dict(base), "decisions", settled_ms),
        TopicSpec(settings.approvals_topic, p, rf, table, role="approvals table"),
        TopicSpec(settings.dlq_topic, p, rf, dict(base), role="dead letters"),
        TopicSpec(
            approval_requests_topic(settings), p, rf, dict(base), role="internal: approval requests"
        ),
    ]


async def _describe(admin: AIOKafkaAdminClient, specs: Sequence[TopicSpec]) -> list[TopicState]:
    # All topics, not the named ones: a metadata request naming a missing topic makes a
    # broker with auto.create.topics.enable create it, with the wrong partition count.
    names = {s.name for s in specs}
    metadata = {t["topic"]: t for t in await admin.describe_topics() if t["topic"] in names}
    present = [s.name for s in specs if s.name in metadata]
    configs: dict[str, dict[str, str]] = {name: {} for name in present}
    if present:
        resources = [ConfigResource(ConfigResourceType.TOPIC, name) for name in present]
        for response in await admin.describe_configs(resources):
            for resource in response.to_object()["resources"]:
                configs[resource["resource_name"]] = {
                    entry["config_names"]: entry["config_value"]
                    for entry in resource["config_entries"]
                }
    states = []
    for spec in specs:
        meta: dict[str, Any] = metadata.get(spec.name, {})
        exists = spec.name in configs
        parts = meta.get("partitions", []) if exists else []
        states.append(
            TopicState(
                spec,
                exists,
                len(parts) if exists else None,
                configs.get(spec.name, {}),
                replication_factor=max((len(p["replicas"]) for p in parts), default=None),
                under_replicated=tuple(
                    sorted(p["partition"] for p in parts if len(p["isr"]) < len(p["replicas"]))
                ),
            )
        )
    return states


async def describe_topics(settings: Settings) -> list[TopicState]:
    """The broker's view of every topology topic; the calls topic warns when approval
    records name an earlier incarnation of it (`older_incarnations`)."""
    async with _admin(settings) as admin:
        states = await _describe(admin, topic_specs(settings))
        _, ids = await topic_ids(admin._client)
    present = {s.spec.name for s in states if s.exists}
    if {settings.calls_topic, settings.approvals_topic} <= present:
        older = await older_incarnations(settings, (ids or {}).get(settings.calls_topic, ""))
        if older:
            warning = (
                f"{older} approval record(s) name an earlier incarnation of this topic (it "
                "was deleted and created again): its calls have ids of their own"
            )
            states = [
                dataclasses.replace(s, warnings=(warning,))
                if s.spec.name == settings.calls_topic
                else s
                for s in states
            ]
    return states


async def older_incarnations(settings: Settings, topic_id: str) -> int:
    """How many live approval records name a calls topic message of an earlier incarnation of
    the topic: parked in another topic id, or (records that keep none) at an offset the
    topic has not reached yet. Reads the whole approvals topic."""
    prefix = f"{settings.calls_topic}:"
    latest: dict[bytes, bytes | None] = {}
    async for message in read_to_end(settings, settings.approvals_topic):
        latest[message.key] = message.value
    async with started(consumer(settings), settings) as client:
        ends = {
            tp.partition: end
            for tp, end in (
                await client.end_offsets(await partitions(client, settings.calls_topic))
            ).items()
        }
    older = 0
    for value in latest.values():
        try:
            record = None if value is None else ApprovalRecord.from_bytes(value)
        except ToolUsageError:
            continue
        if record is None or not record.message_id.startswith(prefix):
            continue
        if record.scope and topic_id:
            older += record.scope != topic_id
            continue
        partition, _, offset = record.message_id[len(prefix) :].partition(":")
        if partition.isdigit() and offset.isdigit():
            older += int(offset) >= ends.get(int(partition), 0)
    return older


async def create_topics(settings: Settings) -> list[TopicState]:
    """Create missing topics; leave existing ones alone and report their drift."""
    specs = topic_specs(settings)
    async with _admin(settings) as admin:
        before = {s.spec.name: s for s in await _describe(admin, specs)}
        missing = [s for s in specs if not before[s.name].exists]
        created: set[str] = set()
        if missing:
            new = [
                NewTopic(s.name, s.partitions, s.replication_factor, topic_configs=s.config)
                for s in missing
            ]
            response = (await admin.create_topics(new)).to_object()
            for topic in response["topic_errors"]:
                code = topic["error_code"]
                if code == 0:
                    created.add(topic["topic"])
                elif code in _NOT_AUTHORIZED:
                    raise NotAuthorized(
                        f"the cluster's ACLs refuse creating topic {topic['topic']}: "
                        "create topics with an administrator's credentials"
                    )
                elif code != _TOPIC_ALREADY_EXISTS:
                    raise BrokerError(
                        f"creating topic {topic['topic']} failed: error {code} "
                        f"{topic.get('error_message') or ''}".rstrip()
                    )
        after = await _describe(admin, specs)
        settle_by = time.monotonic() + CREATE_SETTLE_S
        while _unsettled(after, created) and time.monotonic() < settle_by:
            await asyncio.sleep(0.2)
            after = await _describe(admin, specs)
    return [dataclasses.replace(s, created=s.spec.name in created) for s in after]


def _unsettled(states: Sequence[TopicState], created: set[str]) -> bool:
    """A topic just created does not show as specified yet (missing, or replicas not in sync)."""
    return any(s.problems for s in states if s.spec.name in created)


async def topic_scope(settings: Settings, topic: str) -> str:
    """The scope the worker derives topic's delivery ids in: its Kafka topic id (empty from a
    broker too old to name one); LookupError when the topic does not exist."""
    async with _admin(settings) as admin:
        _, ids = await topic_ids(admin._client)
    if ids is None:
        return ""
    if topic not in ids:
        raise LookupError(f"topic {topic} not found")
    return ids[topic]


def _admin(settings: Settings) -> AbstractAsyncContextManager[AIOKafkaAdminClient]:
    """A started admin client as an async context manager; failing to connect is one clear
    error (kafka_clients)."""
    return kafka_clients.started(settings, kafka_clients.admin(settings))
