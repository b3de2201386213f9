"""Shared fixtures: one real Kafka broker per test session, unique names per test.

The broker is, in order of preference: the one named by `KAFKA_BOOTSTRAP_SERVERS`; a
testcontainers Kafka (apache/kafka, KRaft) when a Docker engine answers; else a local broker
started from the Maven jars (`stream_adapter_dev.broker.local`) on free ports in a temp folder.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from stream_adapter.settings import Settings
from stream_adapter.stream.topics import create_topics
from stream_adapter_dev.broker import local, secure
from tests.harness import ROOT, Client, WorkerProcess, make_settings
from tests.services import (  # noqa: F401
    dynamodb_server,
    postgres_server,
    postgres_url,
    redis_namespace,
    redis_server,
    sqs_server,
)

KAFKA_IMAGE = f"apache/kafka:{local.KAFKA_VERSION}"
JARS_DIR = ROOT / ".kafka" / "libs"


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist each worker process picks free ports from a range of its own (its
    children inherit it), so two workers never choose the same port before either binds it."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None or local.PORT_RANGE_ENV in os.environ:
        return
    index = int(str(workerinput["workerid"]).removeprefix("gw"))
    count = int(workerinput["workercount"])
    whole = local._port_range()
    width = len(whole) // count
    low = whole.start + index * width
    os.environ[local.PORT_RANGE_ENV] = f"{low}-{low + width}"


SLOWEST_FIRST = (
    "integration/test_cluster.py",
    "integration/test_bench_state.py",
    "integration/test_chaos.py",
    "integration/test_secure_cluster.py",
    "integration/test_bench.py",
    "integration/test_bench_scale.py",
    "integration/test_review_browser.py",
    "integration/test_exactly_once.py",
    "integration/test_crashes.py",
    "integration/test_failover.py",
)
"""Test files that take longest, in that order: they start first, so that under pytest-xdist
(whole files per process) no long file begins last and runs on alone."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: place for place, name in enumerate(SLOWEST_FIRST)}
    tests = Path(__file__).parent

    def place(item: pytest.Item) -> int:
        inside = item.path.is_relative_to(tests)
        return rank.get(item.path.relative_to(tests).as_posix(), len(rank)) if inside else len(rank)

    items.sort(key=place)  # a stable sort: the tests of a file keep their order


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=3).ping()
    except Exception:
        return False
    return True


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real broker's bootstrap address for the whole session."""
    configured = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if configured:
        yield configured
        return
    if os.environ.get("STREAM_ADAPTER_TEST_DOCKER", "auto") != "off" and _docker_answers():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer(KAFKA_IMAGE).with_kraft() as container:
            yield container.get_bootstrap_server()
        return
    home = tmp_path_factory.mktemp("kafka")
    config = local.BrokerConfig(
        home=home, port=local.free_port(), controller_port=local.free_port(), jars_dir=JARS_DIR
    )
    yield local.start(config)
    local.stop(config)


@pytest.fixture(scope="session")
def secure_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[secure.SecureBroker]:
    """A broker of the session's own with SASL_SSL, mTLS and the standard authorizer; no ACLs
    yet (each test module grants its own, for its own names)."""
    broker = secure.SecureBroker(
        home=tmp_path_factory.mktemp("kafka-secure"),
        port=local.free_port(),
        mtls_port=local.free_port(),
        controller_port=local.free_port(),
        jars_dir=JARS_DIR,
        heap_mb=512,
    )
    config = broker.config()
    local.start(config, timeout_s=120)
    yield broker
    local.stop(config)


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[local.BrokerConfig]:
    """A broker of this test's own (not started), so killing it disturbs nobody."""
    config = local.BrokerConfig(
        home=tmp_path / "kafka",
        port=local.free_port(),
        controller_port=local.free_port(),
        jars_dir=JARS_DIR,
        heap_mb=384,
    )
    yield config
    local.stop(config, kill=True)


@pytest.fixture(scope="module")
def shared_settings(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Settings for a module whose tests share one worker (stateless rows of the spec)."""
    result = make_settings(kafka_bootstrap, tmp_path_factory.mktemp("shared"))
    asyncio.run(create_topics(result))
    return result


@pytest.fixture(scope="module")
def shared_worker(
    shared_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    """One ready worker for the whole module."""
    worker = WorkerProcess(shared_settings, tmp_path_factory.mktemp("shared-work")).start()
    try:
        asyncio.run(worker.ready())
        yield worker
    finally:
        worker.kill()


@pytest.fixture
async def shared_client(shared_settings: Settings) -> AsyncIterator[Client]:
    async with Client(shared_settings) as result:
        yield result


@pytest.fixture
def settings(kafka_bootstrap: str, tmp_path: Path) -> Settings:
    """Settings with a unique app id and topics; the topics are created."""
    result = make_settings(kafka_bootstrap, tmp_path)
    asyncio.run(create_topics(result))
    return result


@pytest.fixture
def worker_factory(settings: Settings, tmp_path: Path) -> Iterator[type[WorkerProcess]]:
    """Start worker processes for this test's settings; all are killed at teardown."""
    started: list[WorkerProcess] = []

    def make(name: str = "worker", **extra_env: str) -> WorkerProcess:
        worker = WorkerProcess(settings, tmp_path / "work", dict(extra_env), name=name)
        started.append(worker.start())
        return worker

    yield make  # type: ignore[misc]
    for worker in started:
        worker.kill()


@pytest.fixture
async def worker(worker_factory: type[WorkerProcess]) -> WorkerProcess:
    """One ready worker."""
    started = worker_factory()  # type: ignore[call-arg]
    await started.ready()
    return started


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[Client]:
    async with Client(settings) as result:
        yield result
