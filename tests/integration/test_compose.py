"""docker-compose.yml stays wired to the real settings and waits for a healthy broker."""

from __future__ import annotations

import re
from typing import Any

import yaml

from stream_adapter.settings import ENV_PREFIX, Settings
from stream_adapter_dev.broker.local import KAFKA_VERSION
from tests.harness import ROOT


def _compose() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "docker-compose.yml").read_text()))


def test_every_adapter_variable_is_a_setting() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    names = set(re.findall(rf"\b{ENV_PREFIX}([A-Z0-9_]+)", text))
    assert names, "the compose file configures the adapter through its settings"
    known = {name.upper() for name in Settings.model_fields}
    assert names <= known, f"unknown settings in docker-compose.yml: {sorted(names - known)}"


def test_adapter_services_wait_for_a_healthy_broker() -> None:
    services = _compose()["services"]
    assert "healthcheck" in services["kafka"]
    assert services["kafka"]["image"] == f"apache/kafka:{KAFKA_VERSION}"
    adapters = [
        name
        for name, svc in services.items()
        if svc.get("build") and "STREAM_ADAPTER_BROKER" in (svc.get("environment") or {})
    ]
    assert {"topics", "worker", "review"} <= set(adapters)
    for name in adapters:
        depends = services[name]["depends_on"]
        assert depends["kafka"]["condition"] == "service_healthy", name


def test_worker_starts_after_topics_exist() -> None:
    worker = _compose()["services"]["worker"]
    assert worker["depends_on"]["topics"]["condition"] == "service_completed_successfully"
    assert worker["environment"]["STREAM_ADAPTER_BROKER"].startswith("kafka://kafka:")


def test_review_service_is_part_of_the_stack() -> None:
    services = _compose()["services"]
    review = services["review"]
    assert review["command"] == ["review"]
    assert review["environment"]["STREAM_ADAPTER_REVIEW_HOST"] == "0.0.0.0"
    assert review["environment"]["STREAM_ADAPTER_BROKER"].startswith("kafka://kafka:")
    assert review["depends_on"]["topics"]["condition"] == "service_completed_successfully"


def test_prometheus_scrapes_the_workers_metrics_port() -> None:
    services = _compose()["services"]
    prometheus = services["prometheus"]
    mount = next(v for v in prometheus["volumes"] if v.startswith("./prometheus.yml:"))
    assert (ROOT / mount.split(":")[0]).exists()
    config = yaml.safe_load((ROOT / "prometheus.yml").read_text())
    targets = [
        target
        for job in config["scrape_configs"]
        for static in job["static_configs"]
        for target in static["targets"]
    ]
    port = services["worker"]["environment"]["STREAM_ADAPTER_WEB_PORT"]
    assert f"worker:{port}" in targets
    assert f"127.0.0.1:{port}:{port}" in services["worker"]["ports"]


def test_worker_and_review_share_generated_decision_keys() -> None:
    """The one-shot `keys` service writes the key file both read; nobody allows unsigned."""
    services = _compose()["services"]
    keys = services["keys"]
    assert "ensure_keys_file('/keys/decision-keys')" in " ".join(keys["command"])
    volume = next(v.split(":")[0] for v in keys["volumes"] if v.endswith(":/keys"))
    for name in ("worker", "review"):
        service = services[name]
        env = service["environment"]
        assert env["STREAM_ADAPTER_DECISION_KEYS_FILE"] == "/keys/decision-keys", name
        assert f"{volume}:/keys:ro" in service["volumes"], name
        assert service["depends_on"]["keys"]["condition"] == "service_completed_successfully"
        assert "STREAM_ADAPTER_ALLOW_UNSIGNED_DECISIONS" not in env, name
