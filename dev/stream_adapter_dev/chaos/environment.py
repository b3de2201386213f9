"""A run's own names and topics: a unique app id, and topics that admit 1 MiB + 1 envelopes."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from stream_adapter.core.errors import BrokerError
from stream_adapter.core.signing import new_keys_spec
from stream_adapter.settings import Settings
from stream_adapter.stream.topics import create_topics
from stream_adapter_dev.broker.local import free_port


def run_settings(bootstrap: str, workdir: Path, prefix: str, **changes: Any) -> Settings:
    """Settings with a unique app id and topic names, so runs never see each other's messages."""
    base: dict[str, Any] = {
        "broker": bootstrap,
        "data_dir": str(workdir / "data"),
        "web_port": free_port(),
        "log_level": "info",
        "decision_keys": new_keys_spec("chaos"),  # workers refuse unsigned decisions
    }
    return Settings.for_app(f"{prefix}-{uuid.uuid4().hex[:8]}", **{**base, **changes})


async def create_run_topics(settings: Settings) -> None:
    """Create the topology's topics (they admit 1 MiB + 1 envelopes, TOPIC_MAX_MESSAGE_BYTES),
    then check for drift."""
    drift = [state for state in await create_topics(settings) if state.drift]
    if drift:
        raise BrokerError(f"topics drifted: {[(s.spec.name, s.drift) for s in drift]}")
