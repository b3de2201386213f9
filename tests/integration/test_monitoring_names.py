"""Every metric the alert rules and the Grafana dashboard use is one a real worker exports."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.harness import ROOT, WorkerProcess

pytestmark = pytest.mark.integration

NAME = re.compile(r"\b(?:stream_adapter|process|python)_[a-z0-9_]+\b")
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "info": ("_info",),
}


def used_names() -> set[str]:
    """The metric names in the alert rules' expressions and in the dashboard's queries."""
    rule_files = (ROOT / "deploy" / "prometheus").glob("*.yml")
    rules = "\n".join(f.read_text() for f in rule_files if not f.stem.endswith("_test"))
    board = ROOT / "deploy" / "grafana" / "dashboards" / "stream-adapter.json"
    dashboard = json.loads(board.read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", ())]
    exprs.append(dashboard["templating"]["list"][0]["definition"])
    rule_exprs = re.findall(r"expr: (.*(?:\n {10}.*)*)", rules)
    return {name for text in [*exprs, *rule_exprs] for name in NAME.findall(text)}


def exported_names(worker: WorkerProcess) -> set[str]:
    """Every sample name the worker's /metrics can carry, children or not (from TYPE lines)."""
    url = f"http://127.0.0.1:{worker.settings.web_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ()))
        names.update(sample.name for sample in family.samples)
    return names


def test_alerts_and_dashboard_use_only_exported_metrics(shared_worker: WorkerProcess) -> None:
    used = used_names()
    assert {
        "stream_adapter_dead_letters_total",
        "stream_adapter_consumer_lag_messages",
        "stream_adapter_oldest_pending_approval_age_seconds",
        "stream_adapter_pending_approval_age_limit_seconds",
        "stream_adapter_decisions_total",
        "stream_adapter_build_info",
        "stream_adapter_oldest_unknown_outcome_age_seconds",
        "process_cpu_seconds_total",
    } <= used
    missing = used - exported_names(shared_worker)
    assert not missing, f"not exported by the worker: {sorted(missing)}"
