"""The alert rules, the Grafana dashboard and their wiring in docker-compose.yml.

promtool (Debian's `prometheus` package, installed by scripts/services.sh) checks the rules and
runs their unit tests (deploy/prometheus/alerts_test.yml). That the metric names they use are
the ones a worker exports is checked against a real worker in
tests/integration/test_monitoring_names.py.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness import ROOT

ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
ALERT_TESTS = ROOT / "deploy" / "prometheus" / "alerts_test.yml"
DASHBOARDS = ROOT / "deploy" / "grafana" / "dashboards"
PROVISIONING = ROOT / "deploy" / "grafana" / "provisioning"


def promtool(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip(
            "promtool is not installed and could not be: `bash scripts/services.sh install` "
            "installs Debian's prometheus package (needs root)"
        )
    return subprocess.run(
        [found, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def _services() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"])


def _mounts(service: str) -> dict[str, str]:
    """A compose service's bind mounts: container path -> repository path."""
    out = {}
    for volume in _services()[service].get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("./"):
            out[target] = source
    return out


def test_alert_rules_pass_promtool_check() -> None:
    done = promtool("check", "rules", str(ALERTS))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 6 rules found" in done.stdout


def test_alert_rules_unit_tests_pass() -> None:
    done = promtool("test", "rules", ALERT_TESTS.name, cwd=ALERT_TESTS.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_a_broken_rule_fails_its_unit_test(tmp_path: Path) -> None:
    """The rule tests can fail: the lag alert with its comparison turned around does."""
    rules = ALERTS.read_text().replace("offset 10m) > 0", "offset 10m) < 0")
    assert rules != ALERTS.read_text()
    (tmp_path / "alerts.yml").write_text(rules)
    shutil.copy(ALERT_TESTS, tmp_path / ALERT_TESTS.name)
    done = promtool("test", "rules", ALERT_TESTS.name, cwd=tmp_path)
    assert done.returncode != 0
    assert "StreamAdapterLagGrowing" in done.stdout + done.stderr


def test_every_alert_has_a_unit_test_that_fires_it() -> None:
    rules = yaml.safe_load(ALERTS.read_text())
    names = {rule["alert"] for group in rules["groups"] for rule in group["rules"]}
    assert names == {
        "StreamAdapterWorkerDown",
        "StreamAdapterBrokerUnreachable",
        "StreamAdapterDeadLettersGrowing",
        "StreamAdapterLagGrowing",
        "StreamAdapterApprovalWaitingTooLong",
        "StreamAdapterUnsignedDecisions",
    }
    tests = yaml.safe_load(ALERT_TESTS.read_text())["tests"]
    fired = {
        case["alertname"]
        for test in tests
        for case in test.get("alert_rule_test", [])
        if case["exp_alerts"]
    }
    quiet = {
        case["alertname"]
        for test in tests
        for case in test.get("alert_rule_test", [])
        if not case["exp_alerts"]
    }
    assert fired == names and quiet == names  # each fires, and each stays quiet before


def test_prometheus_config_loads_the_rules_as_compose_mounts_them(tmp_path: Path) -> None:
    mounts = _mounts("prometheus")
    rule_files = sorted((ROOT / "deploy" / "prometheus").glob("*.yml"))
    rule_files = [f for f in rule_files if not f.stem.endswith("_test")]
    assert set(mounts) == {
        "/etc/prometheus/prometheus.yml",
        *(f"/etc/prometheus/{f.name}" for f in rule_files),
    }  # every rule file in the repository is mounted
    for target, source in mounts.items():
        shutil.copy(ROOT / source, tmp_path / Path(target).name)
    done = promtool("check", "config", "prometheus.yml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rule_files)} rule files found" in done.stdout


def test_grafana_is_provisioned_with_the_dashboard_and_the_prometheus_source() -> None:
    grafana = _services()["grafana"]
    assert "prometheus" in grafana["depends_on"]
    mounts = _mounts("grafana")
    assert mounts["/etc/grafana/provisioning"] == "./deploy/grafana/provisioning"
    dashboards_dir = next(t for t, s in mounts.items() if s == "./deploy/grafana/dashboards")
    provider = yaml.safe_load((PROVISIONING / "dashboards" / "stream-adapter.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == dashboards_dir
    source = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yml").read_text())
    datasource = source["datasources"][0]
    assert datasource["url"] == "http://prometheus:9090" and datasource["type"] == "prometheus"
    dashboard = json.loads((DASHBOARDS / "stream-adapter.json").read_text())
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len(panels) >= 12
    for panel in panels:
        assert panel["datasource"]["uid"] == datasource["uid"], panel["title"]
        assert panel["targets"] and all(t["expr"] for t in panel["targets"]), panel["title"]
        assert panel.get("description"), panel["title"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_dashboard_legends_name_labels_in_grafana_syntax() -> None:
    """A legend is text with `{{label}}` placeholders; other braces show literally in Grafana."""
    dashboard = json.loads((DASHBOARDS / "stream-adapter.json").read_text())
    legends = [
        (panel["title"], target["legendFormat"])
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
        if "legendFormat" in target
    ]
    assert legends
    for title, legend in legends:
        rest = re.sub(r"\{\{\w+\}\}", "", legend)
        assert "{" not in rest and "}" not in rest, (title, legend)


def _dockerfile() -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    text = (ROOT / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    return [
        " ".join(i.split()) for i in "\n".join(lines).replace("\\\n", " ").splitlines() if i.strip()
    ]


def test_the_image_runs_as_a_user_and_has_a_health_check() -> None:
    instructions = _dockerfile()
    verbs = [i.split()[0] for i in instructions]
    user = instructions[verbs.index("USER")].split()[1]
    assert user.split(":")[0] not in ("0", "root")
    assert verbs.index("USER") > max(n for n, verb in enumerate(verbs) if verb == "RUN")
    assert verbs.count("USER") == 1
    copy = next(i for i in instructions if i.startswith("COPY deploy/healthcheck.py "))
    check = next(i for i in instructions if i.startswith("HEALTHCHECK "))
    assert copy.split()[-1] in check and " CMD " in check
    assert (ROOT / "deploy" / "healthcheck.py").exists()
