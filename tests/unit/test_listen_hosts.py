"""What listens where: the worker's metrics server, the review service and the broker default to
127.0.0.1; compose publishes every port on the host's 127.0.0.1 only."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
import yaml

from stream_adapter.settings import ENV_PREFIX, Settings
from stream_adapter.stream.metrics import Metrics
from stream_adapter.stream.web import MetricsServer
from stream_adapter_dev.broker.local import free_port
from tests.harness import ROOT


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("WEB_HOST", "REVIEW_HOST"):
        monkeypatch.delenv(f"{ENV_PREFIX}{name}", raising=False)


@pytest.mark.usefixtures("clean_env")
def test_every_listener_defaults_to_loopback() -> None:
    settings = Settings()
    for host in (settings.web_host, settings.review_host):
        assert ipaddress.ip_address(host).is_loopback, host


@pytest.mark.usefixtures("clean_env")
async def test_the_metrics_server_binds_loopback_by_default() -> None:
    settings = Settings()
    server = MetricsServer(Metrics(), settings.web_host, free_port())
    await server.start()
    try:
        runner: Any = server._runner
        assert runner is not None, "the metrics server did not start"
        hosts = {address[0] for address in runner.addresses}
        assert hosts and all(ipaddress.ip_address(h).is_loopback for h in hosts), hosts
    finally:
        await server.stop()


def test_compose_publishes_on_loopback_only() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    published = [
        (name, port)
        for name, service in compose["services"].items()
        for port in service.get("ports", [])
    ]
    assert published, "the stack publishes ports"
    for name, port in published:
        text = port if isinstance(port, str) else port.get("host_ip", "")
        assert str(text).startswith("127.0.0.1:"), (name, port)
