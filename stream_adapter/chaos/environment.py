"""A run's own names and topics: a unique app id, and topics that admit 1 MiB + 1 envelopes."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from aiokafka.admin import NewTopic

from stream_adapter import kafka_clients
from stream_adapter.broker.local import free_port
from stream_adapter.errors import BrokerError
from stream_adapter.settings import Settings
from stream_adapter.signing import new_keys_spec
from stream_adapter.stream.topics import create_topics, topic_specs

# The broker refuses records above ~1 MiB by default, which would stop a 1 MiB + 1 envelope
# before the adapter could refuse it. The run's topics admit more, so the adapter is tested.
TOPIC_MAX_MESSAGE_BYTES = 4 << 20
_TOPIC_ALREADY_EXISTS = 36


def run_settings(bootstrap: str, workdir: Path, prefix: str, **changes: Any) -> Settings:
    """Settings with a unique app id and topic names, so runs never see each other's messages."""
    app_id = f"{prefix}-{uuid.uuid4().hex[:8]}"
    base: dict[str, Any] = {
        "broker": bootstrap,
        "app_id": app_id,
        "calls_topic": f"{app_id}-calls",
        "replies_topic": f"{app_id}-replies",
        "decisions_topic": f"{app_id}-decisions",
        "approvals_topic": f"{app_id}-approvals",
        "dlq_topic": f"{app_id}-dlq",
        "data_dir": str(workdir / "data"),
        "web_port": free_port(),
        "log_level": "info",
        "decision_keys": new_keys_spec("chaos"),  # workers refuse unsigned decisions
    }
    base.update(changes)
    return Settings.model_validate(base)


async def create_run_topics(settings: Settings) -> None:
    """Create the topology's topics with a raised max.message.bytes, then check for drift."""
    async with kafka_clients.started(
        settings, kafka_clients.admin(settings, request_timeout_ms=15_000)
    ) as admin:
        new = [
            NewTopic(
                spec.name,
                spec.partitions,
                spec.replication_factor,
                topic_configs={**spec.config, "max.message.bytes": str(TOPIC_MAX_MESSAGE_BYTES)},
            )
            for spec in topic_specs(settings)
        ]
        response = (await admin.create_topics(new)).to_object()
        for topic in response["topic_errors"]:
            if topic["error_code"] not in (0, _TOPIC_ALREADY_EXISTS):
                raise BrokerError(f"creating {topic['topic']} failed: {topic['error_code']}")
    drift = [state for state in await create_topics(settings) if state.drift]
    if drift:
        raise BrokerError(f"topics drifted: {[(s.spec.name, s.drift) for s in drift]}")
