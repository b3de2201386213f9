"""A local three-node cluster: replication of internal topics, the CLI, and a CI-sized chaos
run per guarantee with the busiest leader SIGKILLed under load (the full runs:
`stream-adapter chaos --brokers 3`, docs/chaos.md).

One cluster serves the module; the CLI test stops it, so it comes last.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from stream_adapter.commands import ExitCode
from stream_adapter.settings import Settings
from stream_adapter.stream.topics import create_topics
from stream_adapter_dev.broker import cluster, local
from stream_adapter_dev.chaos.cluster_faults import ClusterControl
from stream_adapter_dev.chaos.scenario import LEADER_KILL, ChaosOptions, run_chaos
from tests.conftest import JARS_DIR
from tests.harness import Client, WorkerProcess, make_settings, wait_for
from tests.integration.test_broker_outage import log_lines

pytestmark = [
    pytest.mark.skipif(not local.shutil.which("java"), reason="the local cluster needs Java"),
    pytest.mark.timeout(600),
]


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[cluster.ClusterConfig]:
    config = cluster.ClusterConfig.on_free_ports(
        tmp_path_factory.mktemp("cluster"), jars_dir=JARS_DIR
    )
    cluster.start(config)
    yield config
    cluster.stop(config, kill=True)


async def _topic_config(bootstrap: str, topic: str, name: str) -> str:
    async with cluster.admin_client(bootstrap) as admin:
        response = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    entries = response[0].to_object()["resources"][0]["config_entries"]
    return next(str(e["config_value"]) for e in entries if e["config_names"] == name)


async def test_internal_topics_are_replicated_three_ways(
    kafka_cluster: cluster.ClusterConfig,
) -> None:
    bootstrap = kafka_cluster.bootstrap
    async with cluster.admin_client(bootstrap) as admin:
        await admin.create_topics([NewTopic("replicated", 3, 3)])
    # A transaction and a group commit make the broker create both internal topics.
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="cluster-test")
    await producer.start()
    async with producer.transaction():
        await producer.send_and_wait("replicated", b"x", partition=0)
    await producer.stop()
    consumer = AIOKafkaConsumer(
        "replicated",
        bootstrap_servers=bootstrap,
        group_id="cluster-test",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        isolation_level="read_committed",
    )
    await consumer.start()
    try:
        assert (await consumer.getone()).value == b"x"
        await consumer.commit()
    finally:
        await consumer.stop()
    states = await cluster.partition_states(
        bootstrap, ["replicated", "__consumer_offsets", "__transaction_state"]
    )
    assert {s.topic for s in states} == {"replicated", "__consumer_offsets", "__transaction_state"}
    assert all(sorted(s.replicas) == [1, 2, 3] for s in states), states
    assert not [s for s in states if s.under_replicated]
    for topic in ("replicated", "__transaction_state"):
        assert await _topic_config(bootstrap, topic, "min.insync.replicas") == "2"
    health = cluster.status(kafka_cluster)
    assert health.healthy and health.registered == [1, 2, 3]


def _leader_kill(guarantee: str) -> ChaosOptions:
    return ChaosOptions(
        calls=300,
        rate=30.0,
        kills=0,
        scale=False,
        brokers=3,
        cluster_faults=(LEADER_KILL,),
        running_kills=(),  # this run is about the leader kill alone
        node_down_s=5.0,
        guarantee=guarantee,
        partitions=4,
        session_timeout_s=6.0,
        max_seconds=300.0,
        recover_timeout_s=120.0,
        seed=19,
    )


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
async def test_leader_kill_loses_nothing(
    guarantee: str, kafka_cluster: cluster.ClusterConfig, tmp_path: Path
) -> None:
    figures = await run_chaos(_leader_kill(guarantee), ClusterControl(kafka_cluster), tmp_path)
    summary = figures.to_json()
    assert [f.kind for f in figures.faults] == [LEADER_KILL], summary
    assert figures.faults[0].recover_s is not None, summary
    assert figures.calls_without_terminal_reply == 0, summary
    assert figures.approvals_asked_twice == 0, summary
    assert figures.approved_runs_twice == 0, summary
    assert figures.unexpected_outcomes == 0, summary
    assert figures.final_lag == 0, summary
    if guarantee == "exactly_once":
        assert figures.duplicate_replies == 0, summary
    assert cluster.status(kafka_cluster).healthy  # the killed node is back


async def test_a_leader_loss_logs_a_line_not_a_flood(
    kafka_cluster: cluster.ClusterConfig, tmp_path: Path
) -> None:
    settings = make_settings(kafka_cluster.bootstrap, tmp_path, replication_factor=3)
    await create_topics(settings)
    worker = WorkerProcess(settings, tmp_path / "work").start()
    control = ClusterControl(kafka_cluster)
    killed: int | None = None
    try:
        await worker.ready()
        async with Client(settings) as client:
            before = await client.call("add", {"a": 1, "b": 1})
            await client.reply_for(call_id=before.call_id, timeout_s=60)
            leader, _ = await control.busiest_leader([settings.calls_topic])
            mark = len(worker.log_text())
            await control.kill_node(leader)
            killed = leader
            sent = await client.call("add", {"a": 1, "b": 41})
            reply = await client.reply_for(call_id=sent.call_id, timeout_s=90)
            assert reply["result"] == 42
            # The clients stop complaining once they have the new leaders: the episode ends.
            await wait_for(
                lambda: "suppressed " in worker.log_text()[mark:],
                timeout_s=60,
                what="the summary of the clients' lines",
            )
            await control.restart_node(leader)  # before the client closes: its fetcher
            killed = None  # would otherwise still be retrying the lost node
        lines = log_lines(worker.log_text()[mark:])
        print(f"{len(lines)} lines at INFO+ from node {leader}'s loss to its return:")
        print("\n".join(" ".join(line) for line in lines))
        clients = [m for level, name, m in lines if name.startswith("aiokafka") and level != "INFO"]
        assert len(clients) <= 2, clients  # the first line of the episode, not a flood
        ours = [m for _, name, m in lines if name == "stream_adapter"]
        assert not [m for m in ours if m.startswith("broker unreachable")], ours  # two answer
        assert [m for m in ours if m.startswith("suppressed ")], ours
        assert len(lines) <= 10, lines
        assert worker.metrics()[("stream_adapter_broker_up", ())] == 1
    finally:
        worker.kill()
        if killed is not None:
            await control.restart_node(killed)


def _topics_cli(settings: Settings, verb: str) -> subprocess.CompletedProcess[str]:
    env = {**settings.to_env(), "COLUMNS": "250", "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "stream_adapter", "topics", verb],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def test_topics_replicated_and_under_replication_reported(
    kafka_cluster: cluster.ClusterConfig, tmp_path: Path
) -> None:
    settings = make_settings(kafka_cluster.bootstrap, tmp_path, replication_factor=3)
    created = _topics_cli(settings, "create")
    assert created.returncode == 0, created.stdout + created.stderr
    assert created.stdout.count("created") == 6
    states = await cluster.partition_states(kafka_cluster.bootstrap, [settings.calls_topic])
    assert all(len(s.replicas) == 3 for s in states)
    assert (
        await _topic_config(kafka_cluster.bootstrap, settings.calls_topic, "min.insync.replicas")
        == "2"
    )
    # Drift: a topic at replication 1 with min ISR 1, where the settings need 3 and 2.
    drifted = make_settings(kafka_cluster.bootstrap, tmp_path / "drift", replication_factor=3)
    async with cluster.admin_client(kafka_cluster.bootstrap) as admin:
        await admin.create_topics(
            [
                NewTopic(
                    drifted.calls_topic,
                    drifted.partitions,
                    1,
                    topic_configs={"min.insync.replicas": "1"},
                )
            ]
        )
    # Created by hand, not by `topics create` (which waits for it): every broker knows of it soon.
    described = await wait_for(
        lambda: "replication factor" in (out := _topics_cli(drifted, "describe")).stdout and out,
        timeout_s=60,
        what="the drifted topic described",
    )
    assert described.returncode == ExitCode.TOPICS
    assert "replication factor 1, needs 3" in described.stdout
    assert "min.insync.replicas=1, needs 2" in described.stdout
    # A node down: its partitions are short of in-sync replicas until it is back.
    cluster.stop_node(kafka_cluster, 3, kill=True)
    try:
        short = await wait_for(
            lambda: _under_replicated(settings), timeout_s=60, what="node 3 out of the ISR"
        )
        assert short.returncode == ExitCode.TOPICS
        assert "under-replicated partitions: " in short.stdout
    finally:
        cluster.start_node(kafka_cluster, 3)
    assert await cluster.wait_in_sync(kafka_cluster.bootstrap, 3, timeout_s=120)
    clean = _topics_cli(settings, "describe")
    assert clean.returncode == 0, clean.stdout


def _under_replicated(settings: Settings) -> subprocess.CompletedProcess[str] | None:
    done = _topics_cli(settings, "describe")
    return done if "under-replicated" in done.stdout else None


def test_cli_status_start_stop(kafka_cluster: cluster.ClusterConfig) -> None:
    cmd = [sys.executable, "-m", "stream_adapter", "kafka"]
    args = ["--brokers", "3", "--home", str(kafka_cluster.home)]
    args += ["--port", str(kafka_cluster.ports[0]), "--jars-dir", str(JARS_DIR)]

    def run(verb: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*cmd, verb, *args], capture_output=True, text=True, timeout=240, check=False
        )

    status = run("status")
    assert status.returncode == 0, status.stdout + status.stderr
    assert status.stdout.count("answers") == 3 and "registered brokers: 1, 2, 3" in status.stdout
    started = run("start")  # the running nodes are reused
    assert started.returncode == 0 and kafka_cluster.bootstrap in started.stdout
    stopped = run("stop")
    assert "stopped" in stopped.stdout
    assert not any(s.running for _, s in cluster.status(kafka_cluster).nodes)
    down = run("status")
    assert down.returncode == ExitCode.BROKER and down.stdout.count("no broker answers") == 3
    restarted = run("start")
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr
    assert cluster.status(kafka_cluster).healthy
