"""The local broker: restarts keep topics and offsets; clear errors; the CLI drives it."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import TopicPartition

from stream_adapter.core.errors import BrokerError
from stream_adapter_dev.broker import local
from tests.cli_support import run
from tests.conftest import JARS_DIR

pytestmark = pytest.mark.skipif(
    not local.shutil.which("java"), reason="the local broker needs Java"
)


async def _produce_and_commit(bootstrap: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic("kept", 3, 1)])
    await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    for i in range(10):
        await producer.send_and_wait("kept", b"%d" % i, partition=i % 3)
    await producer.stop()
    consumer = AIOKafkaConsumer(
        "kept",
        bootstrap_servers=bootstrap,
        group_id="keeper",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    seen = 0
    while seen < 10:
        batches = await consumer.getmany(timeout_ms=1000)
        seen += sum(len(m) for m in batches.values())
    await consumer.commit()
    await consumer.stop()


async def _committed(bootstrap: str) -> tuple[list[str], dict[int, int | None]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    topics = await admin.list_topics()
    await admin.close()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id="keeper", enable_auto_commit=False
    )
    await consumer.start()
    offsets = {p: await consumer.committed(TopicPartition("kept", p)) for p in range(3)}
    await consumer.stop()
    return topics, offsets


async def test_sigkill_and_restart_keeps_topics_and_offsets(
    own_broker: local.BrokerConfig,
) -> None:
    bootstrap = local.start(own_broker)
    await _produce_and_commit(bootstrap)
    topics, before = await _committed(bootstrap)
    assert "kept" in topics and sum(v or 0 for v in before.values()) == 10

    pid = local.status(own_broker).pid
    assert local.stop(own_broker, kill=True)
    assert not local.status(own_broker).running
    assert pid is not None and not local._alive(pid)

    assert local.start(own_broker) == bootstrap
    topics, after = await _committed(bootstrap)
    assert "kept" in topics
    assert after == before


def test_port_taken_is_a_clear_error(own_broker: local.BrokerConfig) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", own_broker.port))
        sock.listen()
        with pytest.raises(BrokerError, match=f"port {own_broker.port}"):
            local.start(own_broker)


def test_broker_dying_during_start_shows_the_log(own_broker: local.BrokerConfig) -> None:
    local.start(own_broker)  # formats the storage
    local.stop(own_broker)
    broken = local.BrokerConfig(
        home=own_broker.home,
        port=own_broker.port,
        controller_port=own_broker.ctrl_port,
        jars_dir=own_broker.jars_dir,
        extra={"num.network.threads": "0"},
    )
    with pytest.raises(BrokerError) as info:
        local.start(broken, timeout_s=60)
    message = str(info.value)
    assert "exited" in message and "during start" in message
    assert "num.network.threads" in message  # the log's tail explains why


def test_missing_java_is_a_clear_error(
    own_broker: local.BrokerConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(BrokerError, match="Java"):
        local.start(own_broker)


def test_cli_start_status_stop(own_broker: local.BrokerConfig) -> None:
    args = [
        "--home",
        str(own_broker.home),
        "--port",
        str(own_broker.port),
        "--jars-dir",
        str(JARS_DIR),
    ]
    cmd = [sys.executable, "-m", "stream_adapter", "kafka"]
    own = local.BrokerConfig(home=own_broker.home, port=own_broker.port)
    try:
        started = subprocess.run(
            [*cmd, "start", *args], capture_output=True, text=True, timeout=180, check=False
        )
        if started.returncode != 0:
            pytest.fail(started.stdout + started.stderr)
        assert started.stdout.strip().endswith(own_broker.bootstrap)
        status = subprocess.run(
            [*cmd, "status", *args], capture_output=True, text=True, timeout=60, check=False
        )
        assert status.returncode == 0 and "answers" in status.stdout
    finally:
        stopped = subprocess.run(
            [*cmd, "stop", *args], capture_output=True, text=True, timeout=60, check=False
        )
    assert "stopped" in stopped.stdout
    assert not local.status(own).running


def test_cli_status_asks_the_port_from_any_folder(kafka_bootstrap: str, tmp_path: Path) -> None:
    # A folder without .kafka: the broker was started elsewhere, yet it answers.
    port = kafka_bootstrap.split(",")[0].rsplit(":", 1)[1]
    ran = run("kafka", "status", "--port", port, cwd=tmp_path)
    assert ran.code == 0, ran
    assert ran.out == f"a broker answers on 127.0.0.1:{port} (not started from .kafka)\n"
    as_json = run("kafka", "status", "--port", port, "--json", cwd=tmp_path)
    assert as_json.json_lines() == [
        {"bootstrap": f"127.0.0.1:{port}", "answers": True, "pid": None, "home": ".kafka"}
    ]
