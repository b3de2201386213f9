"""The unknown-outcome alert rule: valid for promtool, fires only past the worker's limit, and
reads only metrics a worker exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import orjson
import pytest
from prometheus_client import generate_latest

from stream_adapter.stream.metrics import Metrics

RULES = Path(__file__).parent.parent.parent / "deploy" / "prometheus"
RULE_FILE = RULES / "unknown-outcomes.rules.yml"
RULE_TESTS = RULES / "unknown-outcomes.rules_test.yml"

promtool = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(promtool is None, reason="promtool is not installed")


@needs_promtool
def test_the_rule_passes_promtool_check() -> None:
    assert promtool is not None
    done = subprocess.run(
        [promtool, "check", "rules", str(RULE_FILE)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


@needs_promtool
def test_the_rule_fires_only_past_the_limit() -> None:
    assert promtool is not None
    done = subprocess.run(
        [promtool, "test", "rules", RULE_TESTS.name],
        capture_output=True,
        text=True,
        check=False,
        cwd=RULES,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_rule_reads_only_what_a_worker_exports() -> None:
    metrics = Metrics()
    records = [orjson.dumps({"state": "unknown", "unknown_at": "2026-01-01T00:00:00Z"})]
    metrics.watch(lambda: [], lambda: records, unknown_age_limit_s=42.0)
    exported = generate_latest(metrics.registry).decode()
    assert "stream_adapter_unknown_outcomes 1.0" in exported
    assert "stream_adapter_unknown_outcome_age_limit_seconds 42.0" in exported
    used = set(re.findall(r"stream_adapter_[a-z_]+", RULE_FILE.read_text()))
    assert used == {
        "stream_adapter_oldest_unknown_outcome_age_seconds",
        "stream_adapter_unknown_outcome_age_limit_seconds",
    }
    for name in used:
        assert f"\n{name} " in exported, name
