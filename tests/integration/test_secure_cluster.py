"""A cluster with SASL_SSL, mutual TLS and ACLs: the documented least-privilege ACLs, one
principal per role, and clear refusals (wrong password, untrusted certificate, an agent
writing decisions)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiokafka.admin import NewTopic
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from stream_adapter.client import ToolClient
from stream_adapter.commands import ExitCode
from stream_adapter.core.errors import NotAuthorized
from stream_adapter.kafka import clients as kafka_clients
from stream_adapter.ops.acls import Acl
from stream_adapter.settings import Settings
from stream_adapter.stream.topics import topic_specs
from stream_adapter_dev.broker import secure
from tests.harness import (
    ROOT,
    Client,
    WorkerProcess,
    deployment_acls,
    make_settings,
    settings_from_env,
    unique,
)
from tests.integration.review_support import (
    Api,
    ReviewProcess,
    add_reviewer,
    ledger_lines,
    park_invoice,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def deployment(
    secure_broker: secure.SecureBroker, tmp_path_factory: pytest.TempPathFactory
) -> Settings:
    """This module's names on the secured broker: topics created by admin, and exactly the
    ACLs of docs/operations.md granted with Kafka's own kafka-acls tool."""
    base = make_settings(secure_broker.bootstrap, tmp_path_factory.mktemp("secure"))
    admin = settings_from_env(secure_broker.sasl_env("admin"), base)

    async def create() -> None:
        async with kafka_clients.started(admin, kafka_clients.admin(admin)) as client:
            await client.create_topics(
                [
                    NewTopic(s.name, s.partitions, s.replication_factor, topic_configs=s.config)
                    for s in topic_specs(admin)
                ]
            )

    asyncio.run(create())
    admin_client = AdminClient(_librdkafka(secure_broker, "admin"))
    bindings = [binding for acl in deployment_acls(base) for binding in _bindings(acl)]
    for future in admin_client.create_acls(bindings).values():
        future.result(30)
    return base


def _bindings(acl: Acl) -> list[AclBinding]:
    """One documented ACL line as librdkafka's admin client takes it (kafka-acls is a JVM per
    line: minutes on a busy machine; test_kafka_acls_lists_the_documented_acls runs it)."""
    resource = {
        "topic": ResourceType.TOPIC,
        "group": ResourceType.GROUP,
        "transactional-id": ResourceType.TRANSACTIONAL_ID,
    }[acl.resource]
    pattern = ResourcePatternType.PREFIXED if acl.prefixed else ResourcePatternType.LITERAL
    return [
        AclBinding(
            resource,
            acl.name,
            pattern,
            acl.principal,
            "*",
            AclOperation[operation.upper()],
            AclPermissionType.ALLOW,
        )
        for operation in acl.operations
    ]


def as_user(
    broker: secure.SecureBroker, base: Settings, user: str, mechanism: str = "SCRAM-SHA-512"
) -> Settings:
    return settings_from_env(broker.sasl_env(user, mechanism), base)


def _cli(settings: Settings, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`stream-adapter ARGS` as a user would run it, configured by the environment."""
    full = {**os.environ, **settings.to_env(), **env, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "stream_adapter", *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_kafka_acls_lists_the_documented_acls(
    secure_broker: secure.SecureBroker, deployment: Settings
) -> None:
    """Kafka's own kafka-acls reads back, for the agents, exactly the documented lines."""
    out = secure.run_acl_command(
        secure_broker, [*secure.admin_args(secure_broker), "--list", "--principal", "User:agents"]
    )
    listed = set()
    resource = ""
    for line in out.splitlines():
        found = re.search(r"resourceType=(\w+), name=(\S+), patternType=(\w+)\)", line)
        if found:
            resource = ":".join(found.groups())
        op = re.search(r"operation=(\w+), permissionType=ALLOW", line)
        if op:
            listed.add((resource, op.group(1)))
    expected = {
        (
            f"{acl.resource.upper().replace('-', '_')}:{acl.name}:"
            f"{'PREFIXED' if acl.prefixed else 'LITERAL'}",
            operation.upper(),
        )
        for acl in deployment_acls(deployment)
        if acl.principal == "User:agents"
        for operation in acl.operations
    }
    assert listed == expected, out


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
async def test_an_agent_writes_calls_with_each_mechanism(
    secure_broker: secure.SecureBroker, deployment: Settings, mechanism: str
) -> None:
    agents = as_user(secure_broker, deployment, "agents", mechanism)
    producer = kafka_clients.producer(agents)
    async with kafka_clients.started(agents, producer):
        meta = await producer.send_and_wait(agents.calls_topic, b'{"tool": "echo"}')
    assert meta.offset >= 0


async def test_an_agent_with_a_client_certificate_writes_calls(
    secure_broker: secure.SecureBroker, deployment: Settings
) -> None:
    agents = settings_from_env(secure_broker.mtls_env("agents"), deployment)
    producer = kafka_clients.producer(agents)
    async with kafka_clients.started(agents, producer):
        meta = await producer.send_and_wait(agents.calls_topic, b'{"tool": "echo"}')
        with pytest.raises(Exception) as refused:
            await producer.send_and_wait(agents.decisions_topic, b"{}")
    assert meta.offset >= 0
    assert isinstance(kafka_clients.kafka_error(refused.value, "write"), NotAuthorized)


async def test_the_broker_refuses_an_agent_writing_decisions(
    secure_broker: secure.SecureBroker, deployment: Settings
) -> None:
    """Refused by the broker's ACLs, seen by two client families: aiokafka and librdkafka."""
    agents = as_user(secure_broker, deployment, "agents")
    decision = orjson.dumps({"approval_id": "a1", "approved": True, "reviewer": "mallory"})
    producer = kafka_clients.producer(agents)
    async with kafka_clients.started(agents, producer):
        with pytest.raises(Exception) as refused:
            await producer.send_and_wait(agents.decisions_topic, decision, key=b"a1")
    assert isinstance(kafka_clients.kafka_error(refused.value, "write"), NotAuthorized)

    errors: list[Any] = []
    rd = Producer(_librdkafka(secure_broker, "agents"))
    rd.produce(
        agents.decisions_topic, decision, key=b"a1", on_delivery=lambda e, m: errors.append(e)
    )
    rd.flush(30)
    assert errors and errors[0] is not None
    assert errors[0].name() == "TOPIC_AUTHORIZATION_FAILED"

    review = as_user(secure_broker, deployment, "review")
    producer = kafka_clients.producer(review, enable_idempotence=True)
    async with kafka_clients.started(review, producer):
        meta = await producer.send_and_wait(review.decisions_topic, decision, key=b"a1")
    assert meta.offset >= 0


def _librdkafka(broker: secure.SecureBroker, user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": broker.bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": broker.password(user),
        "ssl.ca.location": str(broker.ca_file),
    }


def test_a_wrong_password_is_one_line_and_its_own_exit_code(
    secure_broker: secure.SecureBroker, deployment: Settings
) -> None:
    agents = as_user(secure_broker, deployment, "agents")
    wrong = "not-the-password-1234"
    done = _cli(agents, "call", "echo", "{}", "--wait", "2", STREAM_ADAPTER_SASL_PASSWORD=wrong)
    assert done.returncode == ExitCode.AUTHENTICATION, done.stderr
    _one_clear_line(done, "AuthenticationFailed", "agents")
    assert wrong not in done.stdout + done.stderr


def test_an_untrusted_certificate_is_one_line_and_its_own_exit_code(
    secure_broker: secure.SecureBroker, deployment: Settings, tmp_path: Path
) -> None:
    agents = as_user(secure_broker, deployment, "agents")
    stranger = secure.new_ca("somebody else's CA", tmp_path / "stranger.pem")
    done = _cli(agents, "call", "echo", "{}", STREAM_ADAPTER_SSL_CAFILE=str(stranger))
    assert done.returncode == ExitCode.TLS, done.stderr
    _one_clear_line(done, "TlsFailed", "not trusted")


def test_the_worker_with_a_wrong_password_stops_with_one_line(
    secure_broker: secure.SecureBroker, deployment: Settings
) -> None:
    adapter = as_user(secure_broker, deployment, "adapter")
    done = _cli(adapter, "worker", STREAM_ADAPTER_SASL_PASSWORD="wrong-wrong-wrong")
    assert done.returncode == ExitCode.AUTHENTICATION, done.stderr
    _one_clear_line(done, "AuthenticationFailed", "adapter")


def _one_clear_line(done: subprocess.CompletedProcess[str], kind: str, says: str) -> None:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert kind in lines[0] and says in lines[0]
    assert "Traceback" not in done.stdout + done.stderr


async def test_worker_review_and_call_run_as_their_principals_over_sasl_ssl(
    secure_broker: secure.SecureBroker, deployment: Settings, tmp_path: Path
) -> None:
    """The whole deployment with the documented ACLs and nothing more: an agent calls (the
    CLI, ToolClient and a client), the worker answers, parks a confirm call, the review
    service decides it, the worker runs it once."""
    adapter = as_user(secure_broker, deployment, "adapter")
    review = as_user(secure_broker, deployment, "review").with_changes(
        reviewers_file=tmp_path / "reviewers.json"
    )
    agents = as_user(secure_broker, deployment, "agents")
    worker = WorkerProcess(adapter, tmp_path / "work").start()
    reviewer: ReviewProcess | None = None
    try:
        await worker.ready(timeout_s=120)
        done = await asyncio.to_thread(
            _cli, agents, "call", "add", '{"a": 2, "b": 3}', "--wait", "60"
        )
        assert done.returncode == 0, done.stderr
        assert orjson.loads(done.stdout.splitlines()[-1])["result"] == 5
        async with ToolClient(agents) as tools:  # no consumer group: the agents' ACLs suffice
            assert (await tools.call("add", {"a": 4, "b": 5}, timeout_s=60))["result"] == 9

        token = add_reviewer(review, "ann")
        reviewer = ReviewProcess(review, tmp_path / "review").start()
        await reviewer.ready(timeout_s=120)
        async with Client(agents) as client, aiohttp.ClientSession() as http:
            approval_id = await park_invoice(client, unique("run"))
            api = Api(http, reviewer.url, token)
            await api.wait_listed(approval_id)
            path = f"/api/approvals/{approval_id}/decision"
            status, body = await api.request("POST", path, json={"approved": True})
            assert status == 200, body
            reply = await client.reply_for(status="ok", approval_id=approval_id, timeout_s=60)
        assert reply["tool"] == "send_invoice"
        assert len(ledger_lines(worker.ledger)) == 1
        assert worker.proc is not None and worker.proc.poll() is None
        for log in (worker.log_text(), reviewer.log_text()):
            assert "AuthorizationFailed" not in log and "NotAuthorized" not in log
            for user in ("adapter", "review"):
                assert secure_broker.password(user) not in log
    finally:
        if reviewer is not None:
            reviewer.kill()
        worker.kill()
