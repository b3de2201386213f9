"""`stream-adapter topics create|describe`: idempotent, and drift is reported, not accepted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from stream_adapter.settings import Settings
from stream_adapter.stream.topics import approval_requests_topic
from tests.harness import make_settings


def _cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**settings.to_env(), "COLUMNS": "200", "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "stream_adapter", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def test_create_is_idempotent_and_describe_is_clean(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    settings = make_settings(kafka_bootstrap, tmp_path)
    first = _cli(settings, "topics", "create")
    assert first.returncode == 0, first.stdout + first.stderr
    assert first.stdout.count("created") == 6
    again = _cli(settings, "topics", "create")
    assert again.returncode == 0 and "created" not in again.stdout
    described = _cli(settings, "topics", "describe")
    assert described.returncode == 0
    for name in (settings.calls_topic, settings.approvals_topic, approval_requests_topic(settings)):
        assert name in described.stdout
    as_json = _cli(settings, "topics", "describe", "--json")
    rows = {row["topic"]: row for row in map(json.loads, as_json.stdout.splitlines())}
    assert rows[settings.approvals_topic]["partitions"] == settings.partitions  # an int
    approvals_config = (
        "cleanup.policy=compact, delete.retention.ms=86400000, max.message.bytes=1327104"
    )
    assert rows[settings.approvals_topic]["config"] == approvals_config
    assert all(row["state"] == "ok" and row["drift"] == [] for row in rows.values())


async def test_drift_is_reported(kafka_bootstrap: str, tmp_path: Path) -> None:
    settings = make_settings(kafka_bootstrap, tmp_path)
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    await admin.create_topics(
        [
            NewTopic(settings.calls_topic, 2, 1),
            NewTopic(settings.approvals_topic, settings.partitions, 1),
        ]
    )
    await admin.close()
    created = _cli(settings, "topics", "create")
    assert created.returncode == 6, created.stdout  # a topic differs from its spec
    assert f"has 2 partitions, needs {settings.partitions}" in created.stdout
    assert "cleanup.policy=delete, needs compact" in created.stdout
    described = _cli(settings, "topics", "describe")
    assert described.returncode == 6
    assert f"2 topic(s) missing or not as specified: {settings.calls_topic}" in described.stderr
    missing = make_settings(kafka_bootstrap, tmp_path / "other")
    absent = _cli(missing, "topics", "describe")
    assert absent.returncode == 6 and "missing" in absent.stdout


async def test_a_decisions_topic_kept_longer_than_settled_records_is_drift(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A decision redelivered after its settled record was removed would find no record."""
    settings = make_settings(kafka_bootstrap, tmp_path)
    assert _cli(settings, "topics", "create").returncode == 0
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        resource = ConfigResource(
            ConfigResourceType.TOPIC, settings.decisions_topic, {"retention.ms": "-1"}
        )
        await admin.alter_configs([resource])
    finally:
        await admin.close()
    described = _cli(settings, "topics", "describe")
    assert described.returncode == 6, described.stdout
    assert "retention.ms=-1, needs less than settled_retention_s" in described.stdout
    # Infinite retention never fits, however long settled records are kept.
    years = settings.with_changes(settled_retention_s=10 * 365 * 86400.0)
    assert _cli(years, "topics", "describe").returncode == 6
    calls_only = _cli(settings.with_changes(settled_retention_s=8 * 86400.0), "topics", "describe")
    assert "retention.ms=604800000" not in calls_only.stdout  # the broker's 7 days fit 8
